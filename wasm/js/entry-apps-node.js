// `weft/apps` in Node: `weft` itself (Node loads the apps module at import).
export * from './node.js';
