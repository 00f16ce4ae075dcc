// A test hook: the daemon kills itself (SIGKILL, as a crash) at a named point of a move when
// ROOTBOX_TEST_KILL_AT names that point, so a test leaves exactly the state a kill -9 there leaves
// (test/moves/commit.test.ts). Unset, as in production, it does nothing.

/** SIGKILL of this process when ROOTBOX_TEST_KILL_AT is `point`. */
export function killPoint(point: string): void {
  if (process.env.ROOTBOX_TEST_KILL_AT === point) process.kill(process.pid, 'SIGKILL');
}
