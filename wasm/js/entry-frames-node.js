// `weft/frames` in Node: modules are read from disk synchronously.
import './node-reader.js';

export * from './entry-frames.js';
