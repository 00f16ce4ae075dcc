// What a server's own domain may be, checked before anything is stored or asked of DNS: the
// input made a lowercase ASCII host name (IDN labels to punycode with url.domainToASCII, one
// trailing dot dropped), at least two labels of letters, digits and inner hyphens, at most 253
// characters, not an IP address, not a special-use name (localhost, .local, .invalid, .arpa),
// and never the service's own domain or a name under it (those are <slug>.{domain} already).

import { domainToASCII } from 'node:url';
import { AppError } from '../errors.js';

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const SPECIAL = new Set(['localhost', 'local', 'invalid', 'arpa', 'onion', 'internal']);

const invalid = (detail: string) => AppError.of('invalid_domain', detail);

/** The domain as it is stored and served (punycode, lowercase), or 400 invalid_domain / reserved_domain. */
export function normalizeDomain(input: unknown, serviceDomain: string): string {
  if (typeof input !== 'string' || input.trim() === '') throw invalid('domain must be a host name such as www.example.com');
  const raw = input.trim();
  const shown = raw.slice(0, 100);
  if (/[/:@?#\s\\[\]]/.test(raw)) {
    throw invalid(`${JSON.stringify(shown)} is not a bare host name: give the name alone, without scheme, port, path or brackets (e.g. www.example.com)`);
  }
  if (raw.startsWith('*')) throw invalid('wildcard domains are not supported; add each name on its own');
  const ascii = domainToASCII(raw.replace(/\.$/, ''));
  if (!ascii) throw invalid(`${JSON.stringify(shown)} is not a valid domain name (IDNA conversion failed)`);
  if (ascii.length > 253) throw invalid('a domain name has at most 253 characters');
  const labels = ascii.split('.');
  if (labels.length < 2) throw invalid(`${JSON.stringify(shown)} has one label; give a full name such as www.example.com`);
  for (const l of labels) {
    if (!LABEL.test(l)) throw invalid(`label ${JSON.stringify(l.slice(0, 63))} of the domain must be 1 to 63 letters, digits or inner hyphens`);
  }
  const tld = labels[labels.length - 1];
  if (/^[0-9]+$/.test(tld)) throw invalid(`${JSON.stringify(shown)} is an IP address or ends in a numeric label; give a domain name`);
  if (SPECIAL.has(tld)) {
    throw invalid(`.${tld} names are special-use and cannot carry a public certificate`);
  }
  const own = serviceDomain.toLowerCase();
  if (ascii === own || ascii.endsWith(`.${own}`)) {
    throw AppError.of('reserved_domain', `${ascii} is this service's own domain or under it; servers already answer at <slug>.${own}`);
  }
  return ascii;
}

/** The name of the TXT record that proves a domain's owner asked for it. */
export const txtName = (domain: string): string => `_rootbox.${domain}`;
