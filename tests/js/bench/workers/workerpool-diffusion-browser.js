importScripts('/tests/js/node_modules/workerpool/dist/workerpool.min.js');
importScripts('/tests/js/bench/workers/workerpool-diffusion.cjs');
