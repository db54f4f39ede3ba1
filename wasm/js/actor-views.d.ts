// The actor graph's views, as `weft_core::actors::views` writes them (JSON). Records mirror the
// `$CHAT_ROOT` files, which keep unknown fields: nodes and lines carry them through.
import type { GitCloseout, NodeStatus, NodeType, Role, Diagnostic } from './index.js';

/** A node as every view shows it. */
export interface ActorNode {
  id: string;
  type: NodeType;
  title: string;
  topic: string;
  spawnedBy: string | null;
  /** Children, in spawn order. */
  spawned: string[];
  /** Present only when a lazily opened graph could not read the node's earlier children back:
   * why `spawned` lists only those spawned since the open. */
  spawnedIncomplete?: string;
  status: NodeStatus;
  summary: string;
  /** As written on disk (a contradiction with `status` is diagnosed at open). */
  awaitingUser: boolean;
  hidden: boolean;
  /** The disambiguation node pausing this node's routing, if any. */
  pausedBy: string | null;
  resolvedInto: string[] | null;
  gitCloseout: GitCloseout | null;
  waitOn: { node: string; mode: 'warn' | 'enforce'; [extra: string]: unknown }[];
  related: { kind: string; node: string; [extra: string]: unknown }[];
  viewEpoch: number | null;
  createdAt: string | null;
  lastActivity: string | null;
  /** Chat lines of the node. */
  lines: number;
  mailboxVersion: number;
  /** False while the node's spawn is not yet durable (it refuses messages). */
  persisted: boolean;
}

export interface ActorEdge {
  from: string;
  to: string;
  /** `spawn`, `wait`, or a relation kind. */
  kind: string;
}

/** A chat line with its 1-based line number, or a line that could not be read. */
export type TranscriptLine =
  | { line: number; at: string; role: Role; text: string; tokens?: number; spawn?: string; from?: string; [extra: string]: unknown }
  | { line: number; corrupt: string; error: string };

export interface CloseoutInfo {
  gitCloseout: GitCloseout;
  allowsAutomaticPush: boolean;
  systemAddendum: string;
}

export interface WaitCheck {
  node: string;
  mode: 'warn' | 'enforce';
  /** What applies under `ACTOR_WAIT_GRAPH`: `off`, `warn` or `enforce`. */
  effective: string;
  status: string;
  outcome: 'terminal' | 'warn' | 'blocked' | 'missing' | 'off';
  message: string;
}

export interface GraphView {
  root: string;
  version: number;
  config: Record<string, unknown>;
  nodes: ActorNode[];
  broken: { id: string; type: string | null; spawnedBy: string | null; file: string; error: string }[];
  edges: ActorEdge[];
  diagnostics: Diagnostic[];
}

export interface LinearView {
  focus: string;
  discussions: ActorNode[];
  transcript: TranscriptLine[];
  workers: { id: string; title: string; status: NodeStatus; summary: string }[];
}

export interface GridView {
  epoch: number | null;
  tiles: (ActorNode & { opacity: number; col: number; row: number; waits: WaitCheck[]; closeout: CloseoutInfo })[];
  running: number;
  total: number;
  columns: number;
}

export interface TreeView {
  root: string;
  nodes: (ActorNode & { depth: number; row: number; canSpawn: NodeType[]; detached?: boolean })[];
  edges: ActorEdge[];
}

export interface TemporalView {
  scope: string;
  at: string;
  from: string;
  to: string;
  nodes: {
    id: string;
    type: NodeType;
    title: string;
    status: NodeStatus;
    visible: boolean;
    archived: boolean;
    opacity: number;
    createdAt: string | null;
    lastActivity: string | null;
    awaitingUser: boolean;
  }[];
  /** Token volume per bucket. */
  tokens: number[];
  /** `tokens` scaled to the peak (0..1). */
  heat: number[];
  bookmarks: Record<string, unknown>[];
  epochs: { epoch: number; at: unknown; reason: unknown; nodes: number }[];
}

export interface ForkView {
  node: ActorNode;
  /** The node's `meta.json` record as on disk. */
  meta: Record<string, unknown>;
  transcript: TranscriptLine[];
  mailbox: Record<string, unknown> | null;
  chain: Record<string, unknown>[];
  waits: WaitCheck[];
  closeout: CloseoutInfo;
}

export interface AuditEntry {
  metaLine: number;
  /** `ref`, or `spawn` (its `parentLine` refers to the routing marker). */
  kind: string;
  node: string;
  line: number;
  summary: string;
  ok: boolean;
  problem?: string;
  peek?: { role: Role; text: string; at: string };
}

export interface AuditView {
  refs: number;
  ok: number;
  problems: number;
  entries: AuditEntry[];
}
