import { defineConfig } from 'vite';
import solid from 'vite-plugin-solid';

export default defineConfig({
  plugins: [solid()],
  // The weft package uses top-level await to instantiate its wasm module.
  build: { target: 'es2022', outDir: 'dist', emptyOutDir: true },
  worker: { format: 'es' },
  optimizeDeps: { exclude: ['weft', 'weft/apps'] },
});
