// Typed usage of `weft/frames`: the DGP records are typed (Dgp.Frame, Dgp.Receipt, ...).
import { createFramesEngine, type Dgp, type Principal, dgpTools, dgpFixtureAdapter, type DecisionAdapter } from 'weft/frames';

export function walk(app: object): string[] {
  const e = createFramesEngine({ app, now: () => 1_790_000_000_000 });
  const agent: Principal = { id: 'agent-1', role: 'agent' };
  const frame: Dgp.Frame = e.frame('s1', { disclosure: 'horizon', horizon: 2 });
  const decision = frame.decisions[0];
  if (!decision || decision.kind !== 'choice') return [];
  const option: Dgp.Option | undefined = decision.options[0];
  const request: Dgp.AssessmentRequest = {
    dgp: '0.1', assessment_id: 'a1', frame_id: frame.frame_id, decision_id: decision.decision_id,
    mode: 'live', resolver: { kind: 'rule' },
    result: { status: 'answered', answer: { choice: option?.id ?? 'none', input: {} } },
  };
  const recorded: Dgp.Assessment = e.assess(agent, request);
  const receipt: Dgp.Receipt = e.commit(agent, 'k1', {
    dgp: '0.1', frame_id: recorded.frame_id, decision_id: recorded.decision_id, assessment_id: recorded.assessment_id,
  });
  const texts = frame.observations.map((o: Dgp.Evidence) => (o.kind === 'text' ? o.content : o.evidence_id));
  const surfaces = e.surfaces().surfaces.map((s) => s.surface_id);
  return [receipt.next_frame_href, receipt.effect.required_actor, ...texts, ...surfaces];
}

export const judge: DecisionAdapter = (decision, evidence, frame) => ({
  result: decision.kind === 'score'
    ? { status: 'answered', answer: { score: decision.levels.length - 1 } }
    : { status: 'abstain', reason: `not judged on ${frame.frame_id} with ${evidence.evidence.length} items` },
});

export const tools = dgpTools({ baseUrl: 'http://127.0.0.1:8080', adapter: dgpFixtureAdapter, steps: 4 });
