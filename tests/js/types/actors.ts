// Typed usage of `weft/actors`: views are typed (ActorViews.GridView, ...).
import { openActorStore, type ActorViews, type SpawnResult } from 'weft/actors';

export async function graph(): Promise<string[]> {
  const s = await openActorStore({ backend: 'memory', title: 'demo' });
  const child: SpawnResult = await s.spawn({ parent: s.graph().root, type: 'task', title: 'Render' });
  await s.message({ node: child.id, text: 'hello' });
  await s.status({ node: child.id, status: 'done', summary: 'rendered' });
  const grid: ActorViews.GridView = s.gridView();
  const tree: ActorViews.TreeView = s.treeView();
  const fork: ActorViews.ForkView = s.forkView({ node: child.id });
  const lines = fork.transcript.map((l) => ('corrupt' in l ? `corrupt ${l.line}` : `${l.role}: ${l.text}`));
  const audit = s.auditView();
  await s.close();
  return [...grid.tiles.map((t) => `${t.id} ${t.status} ${t.opacity}`), ...tree.nodes.map((n) => `${n.depth}:${n.id}`), ...lines, String(audit.problems)];
}
