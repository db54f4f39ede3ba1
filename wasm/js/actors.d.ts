// `weft/actors`: the actor graph alone (its WebAssembly module is loaded by the import).
export {
  WeftError,
  ActorConfig,
  NodeType,
  NodeStatus,
  Role,
  GitCloseout,
  SpawnResult,
  Diagnostic,
  OpenReport,
  MutationOptions,
  ActorStore,
  openActorStore,
  deleteActorStore,
  loadActors,
  ActorViews,
} from './index.js';
