// Turns completed passes into the report fields (DESIGN.md part 2): pass vs fail majority with
// abstains excluded, equal counts (0–0 too) are a tie; tally is the larger of the two counts
// over the passes requested; dissent joins the reasoning of every pass not on the majority side
// (on a tie: every pass, unless all agree), labelled with its verdict; null when unanimous.

import type { VerifierPass } from './passes.js';

export interface Aggregate {
  verdict: 'pass' | 'fail' | 'tie';
  tally: string;
  counts: { pass: number; fail: number; abstain: number };
  dissent: string | null;
}

export function aggregate(passes: readonly VerifierPass[], requested: number): Aggregate {
  const counts = { pass: 0, fail: 0, abstain: 0 };
  for (const p of passes) counts[p.verdict]++;
  const verdict = counts.pass > counts.fail ? 'pass' : counts.fail > counts.pass ? 'fail' : 'tie';
  const unanimous = passes.every((p) => p.verdict === passes[0]?.verdict);
  const minority = unanimous ? [] : passes.filter((p) => verdict === 'tie' || p.verdict !== verdict);
  return {
    verdict,
    tally: `${Math.max(counts.pass, counts.fail)}/${requested}`,
    counts,
    dissent: minority.length ? minority.map((p) => `[${p.verdict}] ${p.reasoning}`).join(' | ') : null,
  };
}

/** Fewest completed passes for a report: a majority of those requested. */
export const quorum = (requested: number): number => Math.floor(requested / 2) + 1;
