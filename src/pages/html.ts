// Safe HTML by construction: the `markup` tagged template escapes every interpolated value unless
// it is itself Html (a fragment built the same way, or a constant marked with `trusted`). Pages
// are assembled from these fragments only, so nothing a client, a server record or a config
// value holds can open a tag or an attribute.

export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for an element's content or a quoted attribute value. */
export const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => ENTITIES[c]);

type Value = Html | string | number | boolean | null | undefined | readonly Value[];

function render(v: Value): string {
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map(render).join('');
  if (v === null || v === undefined || v === false) return '';
  return esc(String(v));
}

/** markup`<p>${text}</p>`: interpolated strings and numbers are escaped, Html fragments kept.
 *  (Not named `html`: prettier reformats templates of that name, and a page's inline script must
 *  stay byte-exact for its CSP hash.) */
export function markup(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out);
}

/** Marks a constant of this module's own (CSS, a script) as HTML; never for outside data. */
export const trusted = (s: string): Html => new Html(s);
