// Subdomain slugs: validation (a-z, 0-9, '-', 3–32 chars, no leading/trailing '-', no `xn--`),
// reserved and brand labels, preference order, and friendly random slugs.
//
// The rule for a wanted list: the first slug that is valid, not reserved and free wins. When no
// wanted slug is even usable (all invalid or reserved), or none was given, a random slug is
// assigned and `subdomain_note` says why. When at least one wanted slug was usable but every
// usable one is taken, the answer is 409 `subdomain_taken`: the caller asked for a name it cannot
// have, and a random name would surprise it more than a clear refusal.

import { randomInt } from 'node:crypto';

export const RESERVED = new Set([
  'api',
  'verify',
  'www',
  'ssh',
  'admin',
  'mail',
  'smtp',
  'imap',
  'pop',
  'pop3',
  'ftp',
  'ns',
  'ns1',
  'ns2',
  'mx',
  'root',
  'rootbox',
  'status',
  'docs',
  'help',
  'support',
  'billing',
  'account',
  'accounts',
  'dashboard',
  'console',
  'app',
  'static',
  'cdn',
  'assets',
  'login',
  'auth',
  'oauth',
  'sso',
  'localhost',
  'autoconfig',
  'autodiscover',
  'webmail',
  'postmaster',
  'hostmaster',
  'abuse',
  'security',
  'noc',
  'info',
  'test',
  'dev',
  'staging',
  'internal',
]);

const ADJ = [
  'amber',
  'brisk',
  'calm',
  'clever',
  'cosmic',
  'crisp',
  'dapper',
  'eager',
  'fuzzy',
  'gentle',
  'golden',
  'happy',
  'jolly',
  'keen',
  'lively',
  'lucky',
  'mellow',
  'misty',
  'nimble',
  'noble',
  'plucky',
  'quiet',
  'rapid',
  'rosy',
  'sunny',
  'swift',
  'tidy',
  'vivid',
  'witty',
  'zesty',
  'bold',
  'merry',
];
const NOUN = [
  'otter',
  'falcon',
  'maple',
  'comet',
  'harbor',
  'meadow',
  'pebble',
  'lantern',
  'willow',
  'badger',
  'canyon',
  'ember',
  'fjord',
  'glacier',
  'heron',
  'island',
  'juniper',
  'koala',
  'lagoon',
  'marble',
  'nebula',
  'orchid',
  'panda',
  'quartz',
  'raven',
  'sparrow',
  'tundra',
  'umber',
  'violet',
  'walrus',
  'yarrow',
  'zephyr',
];

export type SlugProblem = 'invalid' | 'reserved';

export function checkSlug(raw: string, brands: ReadonlySet<string>): { slug: string; problem?: SlugProblem; why?: string } {
  const slug = raw.trim().toLowerCase();
  if (slug.length < 3 || slug.length > 32) return { slug, problem: 'invalid', why: 'must be 3 to 32 characters' };
  if (!/^[a-z0-9-]+$/.test(slug)) return { slug, problem: 'invalid', why: 'may contain only a-z, 0-9 and -' };
  if (slug.startsWith('-') || slug.endsWith('-')) return { slug, problem: 'invalid', why: 'may not start or end with -' };
  if (slug.startsWith('xn--')) return { slug, problem: 'invalid', why: 'punycode labels are not accepted' };
  if (RESERVED.has(slug) || brands.has(slug)) return { slug, problem: 'reserved', why: 'is reserved' };
  return { slug };
}

export const randomSlug = (): string => `${ADJ[randomInt(ADJ.length)]}-${NOUN[randomInt(NOUN.length)]}-${randomInt(1000, 10000)}`;

export interface SlugPlan {
  /** Usable slugs in order of preference. */
  candidates: string[];
  /** Why each unusable wanted slug was skipped, for subdomain_note. */
  skipped: string[];
}

export function planSlugs(wanted: string[] | undefined, brands: ReadonlySet<string>): SlugPlan {
  const candidates: string[] = [];
  const skipped: string[] = [];
  for (const w of wanted ?? []) {
    const c = checkSlug(w, brands);
    if (c.problem) skipped.push(`"${c.slug.slice(0, 40)}" ${c.why}`);
    else if (!candidates.includes(c.slug)) candidates.push(c.slug);
  }
  return { candidates, skipped };
}
