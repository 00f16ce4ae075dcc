// A recovery's word to a server's owner (issue 38 item 3): a line appended to the server's own
// /var/log/rootbox.log (the runtime's writer: never through a user's symlink), written by the host
// that made it from its checkpoint, while it runs there.

import { appendRootboxLog } from '../runtime/index.js';
import type { MovesDeps } from './types.js';

/** Appends `text` to server `id`'s rootbox.log; throws when its files cannot be reached. */
export async function noteTo(d: Pick<MovesDeps, 'runtime'>, id: string, text: string): Promise<void> {
  const s = d.runtime.get(id);
  if (!s || !(await appendRootboxLog(s, text))) throw new Error(`server ${id}'s rootbox.log cannot be reached`);
}
