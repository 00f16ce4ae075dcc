// `rootbox image build|list|prune`: the image commands of the command line. They read the
// servers of the configured data dir from its store (LMDB allows a running daemon beside them)
// to know which images are in use. `image build --log FILE` keeps the build tools' output
// (debootstrap's and apt's thousands of lines) in FILE and prints one line per step, with a
// progress line every PROGRESS_MS while a step runs.

import { closeSync, existsSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { openStore } from '../store/index.js';
import { buildImage, formatImages, imageOptions, imageTag, listImages, pruneImages, serverTag } from '../runtime/index.js';

type Records = { id: string; image?: string }[];

const PROGRESS_MS = 10_000;

/** A build's progress lines for a person: steps printed, tool output (lines buildImage indents) kept in `file`, counted. */
export function quietBuild(file: string, out: (text: string) => void, now: () => number = Date.now) {
  const fd = openSync(file, 'a', 0o644);
  let lines = 0;
  let retrieved = 0;
  let unpacked = 0;
  let setUp = 0;
  let shown = now();
  const summary = () => `  … ${lines} lines of output so far: ${retrieved} packages retrieved, ${unpacked} unpacked, ${setUp} set up (details in ${file})\n`;
  return {
    line(l: string): void {
      if (!l.startsWith('  ')) return out(l + '\n');
      const t = l.trim();
      writeSync(fd, t + '\n');
      lines++;
      if (/^I: Retrieving /.test(t)) retrieved++;
      else if (/^(I: Extracting|Unpacking) /.test(t)) unpacked++;
      else if (/^Setting up /.test(t)) setUp++;
      if (now() - shown >= PROGRESS_MS) {
        shown = now();
        out(summary());
      }
    },
    close(): void {
      closeSync(fd);
    },
  };
}

async function serverRecords(dataDir: string): Promise<Records> {
  if (!existsSync(join(dataDir, 'db'))) return [];
  const store = openStore(dataDir);
  try {
    return store.runtime.all().map((r) => ({ id: r.id, image: r.image }));
  } finally {
    await store.close();
  }
}

export async function imageCommand(
  cfg: Pick<Config, 'dataDir' | 'runtime'>,
  sub: string,
  force: boolean,
  out: (text: string) => void,
  /** image build: where the tools' output goes (else it is printed, indented). */
  logFile?: string,
): Promise<number> {
  const o = imageOptions(cfg);
  switch (sub) {
    case 'build': {
      if (force) {
        const users = (await serverRecords(cfg.dataDir)).filter((r) => serverTag(r.image, o) === imageTag(o));
        if (users.length) {
          throw AppError.of(
            'image_in_use',
            `image ${imageTag(o)} is the lower layer of ${users.length} server(s) and cannot be rebuilt in place; change the recipe to build a new image beside it`,
          );
        }
      }
      if (!logFile) {
        await buildImage(o, (l) => out(l + '\n'), force);
        return 0;
      }
      const quiet = quietBuild(logFile, out);
      try {
        await buildImage(o, (l) => quiet.line(l), force);
      } catch (e) {
        out(`the image build failed; its whole output is in ${logFile}\n`);
        throw e;
      } finally {
        quiet.close();
      }
      return 0;
    }
    case 'list':
      out(formatImages(listImages(o, await serverRecords(cfg.dataDir))));
      return 0;
    case 'prune': {
      const removed = pruneImages(o, await serverRecords(cfg.dataDir));
      out(removed.length ? removed.map((t) => `removed ${t}\n`).join('') : 'nothing to remove: every image is in use or current\n');
      return 0;
    }
  }
  return 2;
}
