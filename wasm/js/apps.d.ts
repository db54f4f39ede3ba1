// `weft/apps`: everything `weft` exports, with the apps module (the ops app and agent sessions)
// loaded by the import, so `createApp`, `createClaims`, `createAgent` and
// `validateToolArguments` work at once in a browser.
export * from './index.js';
