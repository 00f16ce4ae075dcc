// Server networking: the bridge, addresses, one veth per server (kept while it sleeps, in its own
// user and network namespaces pinned on the host: ensureNamespaces) and the nftables
// tables `inet <t>` (NAT, isolation, egress counters) and `bridge <t>` (no frames between ports).
//
// Policy (inet <t>):
//   input    from the bridge: only replies to connections the host opened (proxy, ssh
//            direct-tcpip); containers reach no host service, loopback-bound or not.
//   forward  into the bridge: only replies; bridge→bridge (routed container↔container): drop;
//            IPv6 from containers: drop; TCP to runtime.egress.blockedPorts (25): reset;
//            a packet that would open a new connection: through the server's bounds (netbounds.ts:
//            its rate and its count of open connections, over either: dropped and counted);
//            DNS to the host's resolvers: allowed and counted;
//            private, link-local (169.254/16, the metadata address), loopback, CGNAT, multicast
//            ranges and the host's own LAN subnets: drop; everything else: counted per source address in the
//            `egress` map (a named counter per server) and accepted; an unknown source: drop.
//   postrouting  masquerade the subnet out of any other interface (ip_forward is switched on).
// The bridge table drops every frame forwarded from one container port to another, so two
// servers cannot talk at layer 2 either (ARP included).

import { closeSync, existsSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { dirname, join } from 'node:path';
import { AppError } from '../errors.js';
import { hostNameservers } from './image.js';
import { holder, run, tryRun } from './proc.js';
import { mountedPaths } from './disk.js';
import { applyBounds, boundsSetup, isBoundsChain, isBoundsCounter, boundsNames, removeBounds, type NetBounds } from './netbounds.js';

export interface NetConfig {
  bridge: string;
  subnet: string;
  nftTable: string;
  egress: { blockedPorts: readonly number[] };
}

/** Where a server's kept namespaces are pinned (bind mounts of nsfs files; see ensureNamespaces). */
export interface NsPaths {
  user: string;
  net: string;
}

export const nsPaths = (serverDir: string): NsPaths => ({ user: join(serverDir, 'ns', 'user'), net: join(serverDir, 'ns', 'net') });

const BLOCKED = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/3',
];

/** The host's directly connected IPv4 networks (its LAN), except the bridge's own. */
function hostSubnets(bridge: string): string[] {
  const out: string[] = [];
  for (const [name, addrs] of Object.entries(networkInterfaces())) {
    if (name === bridge) continue;
    for (const a of addrs ?? []) {
      if (a.family !== 'IPv4' || a.internal || !a.cidr) continue;
      const [ip, len] = a.cidr.split('/');
      const l = Number(len);
      const net = (toInt(ip) & (l === 0 ? 0 : ~(2 ** (32 - l) - 1))) >>> 0;
      const covered = [...BLOCKED, ...out].some((b) => {
        const [bip, blen] = b.split('/');
        const bl = Number(blen);
        const mask = bl === 0 ? 0 : ~(2 ** (32 - bl) - 1);
        return bl <= l && (net & mask) >>> 0 === (toInt(bip) & mask) >>> 0;
      });
      if (!covered) out.push(`${toIp(net)}/${l}`);
    }
  }
  return out;
}

const toInt = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
const toIp = (n: number) => [24, 16, 8, 0].map((s) => (n >>> s) & 255).join('.');

export class Network {
  readonly bridge: string;
  readonly table: string;
  readonly prefix: number;
  readonly gateway: string;
  private readonly base: number;

  constructor(private readonly cfg: NetConfig) {
    const [addr, len] = cfg.subnet.split('/');
    this.prefix = Number(len);
    this.base = (toInt(addr) & ~(2 ** (32 - this.prefix) - 1)) >>> 0;
    this.gateway = toIp(this.base + 1);
    this.bridge = cfg.bridge;
    this.table = cfg.nftTable;
  }

  /** Server addresses in allocation order (gateway and broadcast excluded). */
  *hosts(): Iterable<string> {
    const size = 2 ** (32 - this.prefix);
    for (let i = 2; i < size - 1; i++) yield toIp(this.base + i);
  }

  /** Host-side veth name of a server: `<bridge>v<host index base36>` (at most 15 chars). */
  vethOf(ip: string): string {
    return `${this.bridge}v${(toInt(ip) - this.base).toString(36)}`;
  }

  /** Whether a link name is one vethOf gives for an address of this subnet. */
  ownVeth(name: string): boolean {
    const m = new RegExp(`^${this.bridge}v([0-9a-z]+)$`).exec(name);
    const n = m ? parseInt(m[1], 36) : 0;
    return !!m && n >= 2 && n < 2 ** (32 - this.prefix) - 1;
  }

  /** Locally administered unicast MAC derived from the address: 0a:58:<ip bytes>. */
  static macOf(ip: string): string {
    return ['0a', '58', ...ip.split('.').map((o) => Number(o).toString(16).padStart(2, '0'))].join(':');
  }

  private counterOf(ip: string): string {
    return `eg_${ip.replace(/\./g, '_')}`;
  }

  /** Creates the bridge, switches on forwarding and (re)loads the rules; idempotent, and
   *  keeps existing per-server counters. */
  async setup(): Promise<void> {
    const br = this.bridge;
    if (!(await tryRun('ip', ['link', 'show', 'dev', br]))) {
      await run('ip', ['link', 'add', br, 'type', 'bridge']);
    }
    await run('ip', ['-b', '-'], {
      input: `addr replace ${this.gateway}/${this.prefix} dev ${br}\nlink set ${br} up\n`,
    });
    writeFileSync('/proc/sys/net/ipv4/ip_forward', '1\n');
    const t = this.table;
    const dns = hostNameservers().filter((ip) => !ip.includes(':'));
    const lines = [
      `add table inet ${t}`,
      `add map inet ${t} egress { type ipv4_addr : counter; }`,
      `add set inet ${t} dns { type ipv4_addr; }`,
      `flush set inet ${t} dns`,
      ...(dns.length ? [`add element inet ${t} dns { ${dns.join(', ')} }`] : []),
      `add chain inet ${t} input { type filter hook input priority 0; policy accept; }`,
      `add chain inet ${t} forward { type filter hook forward priority 0; policy accept; }`,
      `add chain inet ${t} postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
      `flush chain inet ${t} input`,
      `flush chain inet ${t} forward`,
      `flush chain inet ${t} postrouting`,
      `add rule inet ${t} input iifname "${br}" ct state established,related accept`,
      `add rule inet ${t} input iifname "${br}" drop`,
      `add rule inet ${t} forward iifname "${br}" oifname "${br}" drop`,
      `add rule inet ${t} forward oifname "${br}" ct state established,related accept`,
      `add rule inet ${t} forward oifname "${br}" drop`,
      `add rule inet ${t} forward iifname "${br}" meta nfproto ipv6 drop`,
      ...(this.cfg.egress.blockedPorts.length
        ? [`add rule inet ${t} forward iifname "${br}" tcp dport { ${this.cfg.egress.blockedPorts.join(', ')} } reject with tcp reset`]
        : []),
      ...boundsSetup(t, br),
      `add rule inet ${t} forward iifname "${br}" ip daddr @dns meta l4proto { tcp, udp } th dport 53 counter name ip saddr map @egress accept`,
      `add rule inet ${t} forward iifname "${br}" ip daddr { ${[...BLOCKED, ...hostSubnets(br)].join(', ')} } drop`,
      `add rule inet ${t} forward iifname "${br}" counter name ip saddr map @egress accept`,
      `add rule inet ${t} forward iifname "${br}" drop`,
      `add rule inet ${t} postrouting ip saddr ${this.cfg.subnet} oifname != "${br}" masquerade`,
      `add table bridge ${t}`,
      `add chain bridge ${t} forward { type filter hook forward priority 0; policy accept; }`,
      `flush chain bridge ${t} forward`,
      `add rule bridge ${t} forward iifname "${br}v*" oifname "${br}v*" drop`,
    ];
    await run('nft', ['-f', '-'], { input: lines.join('\n') + '\n' });
  }

  /** Removes bridge and tables (tests and `rootbox` uninstall; never on a normal stop). */
  async teardown(): Promise<void> {
    await tryRun('nft', ['delete', 'table', 'inet', this.table]);
    await tryRun('nft', ['delete', 'table', 'bridge', this.table]);
    await tryRun('ip', ['link', 'del', this.bridge]);
  }

  /** Per-server counter and bounds on its connections; kept while the server exists (asleep
   *  too). Called again with other bounds, it changes them (a tier change). */
  async addServer(ip: string, bounds: NetBounds): Promise<void> {
    await this.addCounter(ip);
    await applyBounds(this.table, ip, bounds);
  }

  private async addCounter(ip: string): Promise<void> {
    const c = this.counterOf(ip);
    await run('nft', ['-f', '-'], {
      input: `add counter inet ${this.table} ${c}\nadd element inet ${this.table} egress { ${ip} : "${c}" }\n`,
    }).catch(async (e) => {
      // "element exists" after a crash between the two halves: fine when it maps to our counter.
      if (!/exists/i.test((e as Error).message)) throw e;
    });
  }

  async removeServer(ip: string): Promise<void> {
    await tryRun('nft', ['delete', 'element', 'inet', this.table, 'egress', `{ ${ip} }`]);
    await tryRun('nft', ['delete', 'counter', 'inet', this.table, this.counterOf(ip)]);
    await removeBounds(this.table, ip);
  }

  /**
   * The server's user and network namespaces, made once and kept across sleep (pinned by bind
   * mounts of their nsfs files at `ns.user`/`ns.net`): the user namespace maps container ids
   * 0..65535 to the server's range, the network namespace holds eth0 (address, MAC, default
   * route, lo up) whose veth peer stays on the bridge. Its containers join both (spec.ts), so a
   * wake makes no network and no uid map. Idempotent: a complete pair is left as it is; a partial
   * one (a crash part-way, an older daemon's layout, a host reboot that dropped the mounts) is
   * released and made again. `mounted`: the host's mount points when the caller read them.
   */
  async ensureNamespaces(ip: string, uidBase: number, ns: NsPaths, mounted: Pick<ReadonlySet<string>, 'has'>): Promise<void> {
    const veth = this.vethOf(ip);
    if (mounted.has(ns.user) && mounted.has(ns.net) && existsSync(`/sys/class/net/${veth}`)) return;
    await this.releaseNamespaces(ip, ns, mounted);
    mkdirSync(dirname(ns.user), { recursive: true, mode: 0o700 });
    for (const f of [ns.user, ns.net]) closeSync(openSync(f, 'a', 0o600));
    // a process in fresh namespaces holds them while they are set up and pinned
    const h = holder('unshare', ['--user', '--net', 'cat']);
    try {
      await h.started();
      writeFileSync(`/proc/${h.pid}/uid_map`, `0 ${uidBase} 65536\n`);
      writeFileSync(`/proc/${h.pid}/gid_map`, `0 ${uidBase} 65536\n`);
      await run('ip', [
        'link',
        'add',
        veth,
        'master',
        this.bridge,
        'up',
        'type',
        'veth',
        'peer',
        'name',
        'eth0',
        'address',
        Network.macOf(ip),
        'netns',
        String(h.pid),
      ]);
      await run('nsenter', [`--net=/proc/${h.pid}/ns/net`, 'ip', '-b', '-'], {
        input: `addr add ${ip}/${this.prefix} dev eth0\nlink set lo up\nlink set eth0 up\nroute add default via ${this.gateway}\n`,
      });
      await run('mount', ['--bind', `/proc/${h.pid}/ns/user`, ns.user]);
      await run('mount', ['--bind', `/proc/${h.pid}/ns/net`, ns.net]);
    } catch (e) {
      await h.end();
      await this.releaseNamespaces(ip, ns);
      throw e;
    }
    await h.end();
  }

  /** Unpins a server's namespaces (the network namespace, eth0 and its veth go with them) and
   *  removes its veth at once (a dropped namespace is cleaned up by the kernel a little later). */
  async releaseNamespaces(ip: string, ns: NsPaths, mounted: Pick<ReadonlySet<string>, 'has'> = mountedPaths()): Promise<void> {
    await this.detach(ip);
    for (const f of [ns.net, ns.user]) if (mounted.has(f) && !(await tryRun('umount', [f]))) await run('umount', ['-l', f]);
  }

  /** Whether the host side of a server's veth is there. */
  hasVeth(ip: string): boolean {
    return existsSync(`/sys/class/net/${this.vethOf(ip)}`);
  }

  /**
   * Wires a server's kept network namespace to the bridge again after its veth vanished (someone
   * deleted it; deleting either end takes both): a new pair is made inside the namespace with its
   * host side moved to the daemon's, eth0 gets its address, MAC and route back. The container's
   * processes keep their sockets (a listener on 0.0.0.0 answers on the new eth0).
   */
  async rewire(ip: string, ns: NsPaths): Promise<void> {
    const veth = this.vethOf(ip);
    const inNs = (args: string[], input?: string) => run('nsenter', [`--net=${ns.net}`, 'ip', ...args], input ? { input } : {});
    await tryRun('nsenter', [`--net=${ns.net}`, 'ip', 'link', 'del', 'eth0']);
    await inNs(['link', 'add', 'eth0', 'address', Network.macOf(ip), 'type', 'veth', 'peer', 'name', veth, 'netns', String(process.pid)]);
    await run('ip', ['link', 'set', veth, 'master', this.bridge, 'up']);
    await inNs(['-b', '-'], `addr add ${ip}/${this.prefix} dev eth0\nlink set lo up\nlink set eth0 up\nroute add default via ${this.gateway}\n`);
  }

  /** Addresses that have an element in the egress map; undefined when the table cannot be read. */
  async egressIps(): Promise<Set<string> | undefined> {
    const r = await tryRun('nft', ['-j', 'list', 'map', 'inet', this.table, 'egress']);
    if (!r) return undefined;
    try {
      const doc = JSON.parse(r.stdout) as { nftables: { map?: { elem?: unknown[][] } }[] };
      return new Set(doc.nftables.flatMap((x) => (x.map?.elem ?? []).map((e) => String(e[0]))));
    } catch {
      return undefined;
    }
  }

  /** Removes the host side of a server's veth if it is still there. */
  async detach(ip: string): Promise<void> {
    if (existsSync(`/sys/class/net/${this.vethOf(ip)}`)) await tryRun('ip', ['link', 'del', this.vethOf(ip)]);
  }

  /** Removes egress elements, counters and veths of addresses no server holds (what a crash
   *  between two steps, or a command that outlived a killed daemon, can leave). Returns what went. */
  async prune(keep: ReadonlySet<string>): Promise<string[]> {
    const gone: string[] = [];
    const list = async (args: string[]) => {
      const r = await tryRun('nft', ['-j', ...args]);
      try {
        return r ? ((JSON.parse(r.stdout) as { nftables: Record<string, any>[] }).nftables ?? []) : [];
      } catch {
        return [];
      }
    };
    for (const x of await list(['list', 'map', 'inet', this.table, 'egress'])) {
      for (const e of (x.map?.elem ?? []) as unknown[][]) {
        const ip = e[0];
        if (typeof ip === 'string' && !keep.has(ip) && (await tryRun('nft', ['delete', 'element', 'inet', this.table, 'egress', `{ ${ip} }`])))
          gone.push(`egress ${ip}`);
      }
    }
    for (const x of await list(['list', 'map', 'inet', this.table, 'bounds'])) {
      for (const e of (x.map?.elem ?? []) as unknown[][]) {
        const ip = e[0];
        if (typeof ip === 'string' && !keep.has(ip) && (await tryRun('nft', ['delete', 'element', 'inet', this.table, 'bounds', `{ ${ip} }`])))
          gone.push(`bounds ${ip}`);
      }
    }
    const chains = new Set([...keep].map((ip) => boundsNames(ip).chain));
    for (const x of await list(['list', 'chains', 'inet'])) {
      const name = x.chain?.table === this.table ? (x.chain?.name as string | undefined) : undefined;
      if (name && isBoundsChain(name) && !chains.has(name) && (await tryRun('nft', ['delete', 'chain', 'inet', this.table, name]))) gone.push(`chain ${name}`);
    }
    const counters = new Set([...keep].flatMap((ip) => [this.counterOf(ip), ...boundsNames(ip).counters]));
    for (const x of await list(['list', 'counters', 'table', 'inet', this.table])) {
      const name = x.counter?.name as string | undefined;
      if (
        name &&
        (name.startsWith('eg_') || isBoundsCounter(name)) &&
        !counters.has(name) &&
        (await tryRun('nft', ['delete', 'counter', 'inet', this.table, name]))
      )
        gone.push(`counter ${name}`);
    }
    const veths = new Set([...keep].map((ip) => this.vethOf(ip)));
    const links = await tryRun('ip', ['-j', 'link', 'show', 'master', this.bridge]);
    let names: string[] = [];
    try {
      names = links ? (JSON.parse(links.stdout || '[]') as { ifname: string }[]).map((l) => l.ifname) : [];
    } catch {
      names = [];
    }
    for (const n of names) {
      // only this daemon's own veths: `<bridge>v<base36>` enslaved to its own bridge (locks.ts keeps
      // another daemon off this bridge; a link someone else attached is not ours to remove)
      if (this.ownVeth(n) && !veths.has(n) && (await tryRun('ip', ['link', 'del', n]))) gone.push(`veth ${n}`);
    }
    return gone;
  }

  async egressBytes(ip: string): Promise<number> {
    const r = await tryRun('nft', ['-j', 'list', 'counter', 'inet', this.table, this.counterOf(ip)]);
    if (!r) return 0;
    try {
      const doc = JSON.parse(r.stdout) as { nftables: { counter?: { bytes: number } }[] };
      return doc.nftables.find((x) => x.counter)?.counter?.bytes ?? 0;
    } catch {
      throw AppError.of('nft_output', 'unexpected output from nft list counter');
    }
  }
}
