// Lint for src/: module boundaries (DESIGN part 4) and the few rules that catch real bugs.
// A module is a folder under src/; others reach it only through its index.ts. lmdb, child_process,
// ssh2, node-pty and http-proxy-3 each belong to one module (child_process to two: the runtime, and
// the operator's tooling in ops/ that runs systemctl, cp and the host's checks). `npm run lint` runs this.

import tseslint from 'typescript-eslint';

const internals = {
  // `../<module>/<file>` where file is not index: another module's internals.
  regex: '^\\.\\./[a-z0-9-]+/(?!index(\\.js)?$)[^/]+$',
  message: 'import another module only through its index.ts (DESIGN part 4)',
};
const rootInternals = {
  // from a file at src/ itself (main.ts, cli.ts …): `./<module>/<file>` that is not index.
  regex: '^\\./[a-z0-9-]+/(?!index(\\.js)?$)[^/]+$',
  message: 'import a module only through its index.ts (DESIGN part 4)',
};
const owned = (name, owners) => ({ name, message: `${name} is used only inside ${owners.map((o) => `src/${o}/`).join(' and ')} (DESIGN part 3)` });
const OWNERS = [
  ['lmdb', ['store']],
  ['child_process', ['runtime', 'ops']],
  ['node:child_process', ['runtime', 'ops']],
  ['ssh2', ['ssh']],
  ['node-pty', ['runtime']],
  ['http-proxy-3', ['proxy']],
  ['pg', ['registry']],
];

/** Arrows that must never exist (src/README.md): module → modules it may not import at all. */
const FORBIDDEN = {
  runtime: ['hosting', 'proxy', 'ssh', 'presence', 'billing', 'verify', 'payments', 'edge', 'admin', 'ops'],
  presence: ['proxy', 'ssh', 'hosting', 'edge', 'admin'],
  payments: ['verify', 'hosting', 'billing', 'edge', 'admin'],
  http: ['hosting', 'verify', 'proxy', 'ssh', 'billing', 'runtime', 'presence', 'edge', 'admin'],
  edge: ['hosting', 'verify', 'proxy', 'ssh', 'billing', 'runtime', 'presence', 'admin', 'domains', 'channel'],
  store: ['hosting', 'verify', 'proxy', 'ssh', 'billing', 'runtime', 'presence', 'edge', 'admin', 'payments'],
  proxy: ['edge', 'hosting', 'ssh', 'admin', 'channel'],
  ssh: ['proxy', 'hosting', 'edge', 'admin'],
  registry: ['hosting', 'verify', 'proxy', 'ssh', 'billing', 'runtime', 'presence', 'edge', 'admin', 'store', 'payments', 'channel'],
  mcp: ['hosting', 'verify', 'proxy', 'ssh', 'billing', 'runtime', 'presence', 'edge', 'admin', 'store', 'payments'],
  // the HTTP/1.1 wire format knows no part of the daemon
  h1: [
    'billing',
    'config',
    'domains',
    'edge',
    'hosting',
    'http',
    'llm',
    'log',
    'metrics',
    'net',
    'payments',
    'presence',
    'proxy',
    'runtime',
    'sms',
    'ssh',
    'store',
    'verify',
    'mcp',
    'ops',
    'admin',
    'acme',
    'pages',
  ],
};

function restricted(module) {
  const never = FORBIDDEN[module] ?? [];
  return {
    'no-restricted-imports': [
      'error',
      {
        paths: OWNERS.filter(([, owners]) => !owners.includes(module)).map(([n, o]) => owned(n, o)),
        patterns: [
          module ? internals : rootInternals,
          ...(never.length
            ? [
                {
                  regex: `^\\.\\./(${never.join('|')})/`,
                  message: `src/${module}/ must never import these modules (src/README.md, arrows that must never exist)`,
                },
              ]
            : []),
        ],
      },
    ],
  };
}

const modules = [
  'billing',
  'channel',
  'checkpoints',
  'config',
  'domains',
  'edge',
  'h1',
  'hosting',
  'http',
  'llm',
  'log',
  'mcp',
  'metrics',
  'net',
  'ops',
  'payments',
  'presence',
  'proxy',
  'registry',
  'runtime',
  'sms',
  'ssh',
  'store',
  'verify',
  'admin',
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'var/**', 'test/**', 'bench/**', 'scripts/**', '*.mjs', '*.js'] },
  {
    files: ['src/**/*.ts'],
    languageOptions: { parser: tseslint.parser },
    plugins: { '@typescript-eslint': tseslint.plugin },
    rules: {
      'no-debugger': 'error',
      'no-dupe-keys': 'error',
      'no-unreachable': 'error',
      'no-self-assign': 'error',
      'no-fallthrough': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      ...restricted(undefined),
    },
  },
  ...modules.map((m) => ({ files: [`src/${m}/**/*.ts`], rules: restricted(m) })),
);
