// Typed usage of `weft/apps` (and `loadApps` from `weft`): the apps entry exports what `weft`
// does, with the ops app and agent sessions loaded.
import { createApp, createAgent, createRuntime, scriptedModel, validateToolArguments, type App, type Agent } from 'weft/apps';
import { loadApps, createClaims } from 'weft';

export async function agentOnApp(): Promise<{ app: App; agent: Agent; ok: boolean }> {
  await loadApps();
  const app = createApp({ retention: { operations: 8 } });
  const rt = createRuntime();
  const agent = createAgent(rt, { model: scriptedModel([{ text: 'hi' }]) });
  const claims = createClaims<{ n: number }, string>({ acquire: ({ n }) => String(n), release: () => undefined });
  claims.dispose();
  const { ok }: { ok: boolean; errors: string[] } = validateToolArguments({ type: 'object' }, {});
  return { app, agent, ok };
}
