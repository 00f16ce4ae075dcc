// Runs the verifier passes of one call concurrently. Each pass has its own deadline (covering
// its one retry), its own model from the rotation, a temperature offset and its own prompt
// variant; unusable output (provider error, timeout, non-JSON, wrong shape) is retried once.

import { LlmError, type Llm } from '../llm/index.js';
import { metrics } from '../metrics/index.js';
import { buildPrompt, PASS_FORMAT } from './prompt.js';

export interface VerifierPass {
  verdict: 'pass' | 'fail' | 'abstain';
  reasoning: string;
}

export interface PassSettings {
  llm: Llm;
  models: readonly string[];
  temperature: number;
  maxTokens: number;
  passTimeoutMs: number;
}

export interface PassesOutcome {
  /** Completed passes, in pass order. */
  passes: VerifierPass[];
  /** One short reason per failed pass. */
  failures: string[];
}

const MAX_REASONING = 2000;

/** Reads a model answer; null when it is not a usable verdict. */
export function parsePass(content: string): VerifierPass | null {
  const text = content
    .trim()
    .replace(/^```(?:json)?\s*/i, '')
    .replace(/\s*```$/, '');
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object') return null;
  const { verdict, reasoning } = v as Record<string, unknown>;
  if (verdict !== 'pass' && verdict !== 'fail' && verdict !== 'abstain') return null;
  if (typeof reasoning !== 'string' || !reasoning.trim()) return null;
  const r = reasoning.trim();
  return { verdict, reasoning: r.length > MAX_REASONING ? r.slice(0, MAX_REASONING - 1) + '…' : r };
}

/** Per-pass temperature: base plus an offset in [-0.2, +0.2] cycling with the pass index. */
export const temperatureFor = (base: number, pass: number): number => Math.min(2, Math.max(0, Math.round((base + ((pass % 5) - 2) * 0.1) * 100) / 100));

/** One pass, timed and counted (rootbox_llm_pass_seconds, rootbox_llm_passes_total). */
async function runPass(s: PassSettings, artifact: string, rubric: string, pass: number): Promise<VerifierPass> {
  const t0 = performance.now();
  try {
    const v = await attemptPass(s, artifact, rubric, pass);
    metrics.llmPass((performance.now() - t0) / 1000, true);
    return v;
  } catch (e) {
    metrics.llmPass((performance.now() - t0) / 1000, false);
    throw e;
  }
}

async function attemptPass(s: PassSettings, artifact: string, rubric: string, pass: number): Promise<VerifierPass> {
  const deadline = performance.now() + s.passTimeoutMs;
  const late = () => performance.now() >= deadline;
  let last = 'no attempt';
  for (let attempt = 0; attempt < 2 && !late(); attempt++) {
    const prompt = buildPrompt(artifact, rubric, pass);
    try {
      const content = await s.llm.chat({
        model: s.models[pass % s.models.length],
        system: prompt.system,
        user: prompt.user,
        temperature: temperatureFor(s.temperature, pass),
        maxTokens: s.maxTokens,
        format: PASS_FORMAT,
        deadline,
      });
      const parsed = parsePass(content);
      if (parsed) return parsed;
      last = 'unusable output';
    } catch (e) {
      last = e instanceof LlmError ? e.message : late() ? 'timed out' : `error: ${(e as Error).message}`;
    }
  }
  throw new Error(late() ? `timed out after ${s.passTimeoutMs} ms (${last})` : last);
}

export async function runPasses(s: PassSettings, artifact: string, rubric: string, count: number): Promise<PassesOutcome> {
  const settled = await Promise.allSettled(Array.from({ length: count }, (_, i) => runPass(s, artifact, rubric, i)));
  const passes: VerifierPass[] = [];
  const failures: string[] = [];
  settled.forEach((r, i) => (r.status === 'fulfilled' ? passes.push(r.value) : failures.push(`pass ${i + 1}: ${(r.reason as Error).message}`)));
  return { passes, failures };
}
