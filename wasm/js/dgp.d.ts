// DGP 0.1 records, as the normative JSON Schema (numerous-com/dgp, `dgp.schema.json`) defines
// them: one interface per `$defs` entry, written by hand from the schema. The suite checks them
// (tests/js/types): every example message of the DGP repository, and records the engine emits,
// must type-check against these declarations with `tsc --strict`.

/** Open extension members, allowed on every record. */
export type Extensions = Record<string, unknown>;

export type Dgp = '0.1';

export interface ReadVersion {
  resource_id: string;
  revision: number;
  extensions?: Extensions;
}

export interface Source {
  kind: 'application' | 'user' | 'model';
  id: string;
  model?: string;
  based_on_frame?: string;
  extensions?: Extensions;
}

export interface Blob {
  href: string;
  /** Lower-case hex SHA-256 of the bytes. */
  sha256: string;
  byte_length: number;
  extensions?: Extensions;
}

export type EvidenceKind = 'text' | 'json' | 'image' | 'audio' | 'video' | 'document' | 'timeseries';

interface EvidenceBase {
  evidence_id: string;
  kind: EvidenceKind;
  mime_type: string;
  required: boolean;
  trust: 'observed' | 'untrusted' | 'derived';
  source: Source;
  derived_from?: string[];
  extensions?: Extensions;
}

/** Evidence carries either inline `content` (always for `text`) or a `blob` (always for media). */
export type Evidence =
  | (EvidenceBase & { kind: 'text'; content: string; blob?: never })
  | (EvidenceBase & { kind: 'json' | 'timeseries'; content: unknown; blob?: never })
  | (EvidenceBase & { kind: Exclude<EvidenceKind, 'text'>; blob: Blob; content?: never });

export interface Effect {
  world_mutation: 'none' | 'internal' | 'external';
  recovery: 'not_applicable' | 'exact' | 'compensatable' | 'irreversible' | 'unknown';
  data_egress: 'none' | 'approved_provider' | 'external';
  speculation: 'evaluation_only' | 'sandbox_only' | 'forbidden';
  required_actor: 'any_authorized' | 'human';
  simulation: boolean;
  extensions?: Extensions;
}

export interface Option {
  id: string;
  label: string;
  meaning: string;
  input_schema: object;
  effect: Effect;
  extensions?: Extensions;
}

export interface Fulfillment {
  service_id: string;
  purpose: string;
  output_field: string;
  extensions?: Extensions;
}

export interface Execution {
  conflict_keys: string[];
  depends_on: string[];
  exclusive_group?: string;
  extensions?: Extensions;
}

interface DecisionBase {
  decision_id: string;
  node_id: string;
  question: string;
  evidence_ids: string[];
  dispatch: 'automatic' | 'on_request';
  options?: Option[];
  levels?: string[];
  input_schema?: object;
  effect?: Effect;
  fulfillment?: Fulfillment;
  execution: Execution;
  extensions?: Extensions;
}

/** A decision: `choice` has options, `score` has levels, `input` has an input schema and effect. */
export type Decision =
  | (DecisionBase & { kind: 'choice'; options: Option[] })
  | (DecisionBase & { kind: 'score'; levels: string[] })
  | (DecisionBase & { kind: 'probability' })
  | (DecisionBase & { kind: 'input'; input_schema: object; effect: Effect });

export interface Edge {
  from: string;
  to: string;
  on: string;
  guard_summary?: string;
  extensions?: Extensions;
}

export interface Preview {
  graph_id: string;
  graph_version: string;
  horizon: number | null;
  completeness: 'complete_template' | 'partial';
  nodes: string[];
  edges: Edge[];
  omitted_reason?: string;
  extensions?: Extensions;
}

export type DisclosureLevel = 'next' | 'horizon' | 'full';

export interface Disclosure {
  requested: DisclosureLevel;
  provided: DisclosureLevel;
  preview?: Preview;
  extensions?: Extensions;
}

export interface Frame {
  dgp: Dgp;
  frame_id: string;
  surface_id: string;
  graph_id: string;
  graph_version: string;
  policy_ref: string;
  /** RFC 3339 date-time. */
  created_at: string;
  expires_at: string;
  read_set: [ReadVersion, ...ReadVersion[]];
  observations: Evidence[];
  decisions: Decision[];
  disclosure: Disclosure;
  service_calls_remaining: number;
  required_features: string[];
  extensions?: Extensions;
}

export interface Resolver {
  kind: 'decision_model' | 'llm' | 'human' | 'rule';
  provider?: string;
  model?: string;
  extensions?: Extensions;
}

export interface Uncertainty {
  distribution?: Record<string, number>;
  provider_confidence?: number;
  semantics: string;
  selection_propensity?: number;
  calibration_ref?: string;
  extensions?: Extensions;
}

export type Answer =
  | { choice: string; input: object; extensions?: Extensions }
  | { value: unknown; extensions?: Extensions }
  | { probability: number; extensions?: Extensions }
  | { score: number; extensions?: Extensions };

export type Result =
  | { status: 'answered'; answer: Answer; reason?: string; uncertainty?: Uncertainty; extensions?: Extensions }
  | { status: 'abstain'; answer?: never; reason?: string; uncertainty?: Uncertainty; extensions?: Extensions };

export interface Assumption {
  description: string;
  expected_decision_id?: string;
  expected_choice?: string;
  extensions?: Extensions;
}

export interface AssessmentRequest {
  dgp: Dgp;
  assessment_id: string;
  frame_id: string;
  decision_id: string;
  mode: 'live' | 'speculative';
  resolver: Resolver;
  result: Result;
  assumptions?: Assumption[];
  required_features?: string[];
  extensions?: Extensions;
}

export interface Assessment extends AssessmentRequest {
  recorded_at: string;
  submitted_by: string;
  claim_provenance: 'client_asserted';
}

export interface CommitRequest {
  dgp: Dgp;
  frame_id: string;
  decision_id: string;
  assessment_id: string;
  required_features?: string[];
  extensions?: Extensions;
}

export interface Receipt {
  dgp: Dgp;
  receipt_id: string;
  frame_id: string;
  decision_id: string;
  assessment_id: string;
  submitted_by: string;
  status: 'succeeded';
  committed_at: string;
  state_revision: number;
  effect: Effect;
  outcome: string;
  next_frame_href: string;
  extensions?: Extensions;
}

export interface GraphNode {
  id: string;
  kind: 'choice' | 'input' | 'terminal';
  summary: string;
  extensions?: Extensions;
}

export interface Graph {
  dgp: Dgp;
  graph_id: string;
  graph_version: string;
  completeness: 'complete_template' | 'partial';
  nodes: GraphNode[];
  edges: Edge[];
  semantics: string;
  extensions?: Extensions;
}

export interface Service {
  service_id: string;
  operation: 'reason' | 'generate_text';
  input_modalities: string[];
  output_kind: 'text';
  max_output_chars: number;
  side_effects: 'provider_cost_and_data_egress';
  purpose: string;
  extensions?: Extensions;
}

export interface Manifest {
  dgp: Dgp;
  name: string;
  status: 'experimental';
  features: string[];
  evidence_modalities: string[];
  decision_kinds: string[];
  input_schema_dialect: string;
  links: {
    surfaces: string;
    graphs: string;
    assessments: string;
    commits: string;
    services: string;
    extensions?: Extensions;
  };
  auth: string;
  idempotency_retention: string;
  extensions?: Extensions;
}

export interface Problem {
  dgp: Dgp;
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  extensions?: Extensions;
}
