// rbx-idmount: mounts a server's overlay with the base image as an idmapped, read-only lower
// layer (called by src/runtime/helper.ts). runc 1.1 and util-linux 2.38 cannot make idmapped
// mounts; the kernel can (open_tree + mount_setattr(MOUNT_ATTR_IDMAP) with a userns fd). The
// lower clone is never attached anywhere: overlayfs takes it through /proc/self/fd/N, so no extra
// mount is left to track. Cost: ~4 ms per mount.
// Built by `npm run build` (build.mjs, run by scripts/setup) into dist/bin/rbx-idmount-<hash of
// this file>, with the flags of the next line.
// cflags: -O2 -Wall

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define RBX_OPEN_TREE_CLONE 1
#define RBX_AT_RECURSIVE 0x8000
#define RBX_MOUNT_ATTR_RDONLY 0x1
#define RBX_MOUNT_ATTR_IDMAP 0x100000
#define RBX_MOVE_MOUNT_F_EMPTY_PATH 0x4

struct rbx_mount_attr { uint64_t attr_set, attr_clr, propagation, userns_fd; };

static void die(const char *what) { fprintf(stderr, "rbx-idmount: %s: %s\n", what, strerror(errno)); exit(1); }

static int userns_fd(const char *base, const char *count) {
  int ready[2], hold[2];
  if (pipe(ready) || pipe(hold)) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(ready[0]); close(hold[1]);
    if (unshare(CLONE_NEWUSER)) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    (void)read(hold[0], &c, 1);
    _exit(0);
  }
  close(ready[1]); close(hold[0]);
  char c;
  if (read(ready[0], &c, 1) != 1) die("child unshare(CLONE_NEWUSER)");
  char path[64], map[64];
  snprintf(map, sizeof map, "0 %s %s\n", base, count);
  const char *files[] = {"uid_map", "gid_map"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "/proc/%d/%s", pid, files[i]);
    int f = open(path, O_WRONLY);
    if (f < 0 || write(f, map, strlen(map)) != (ssize_t)strlen(map)) die(path);
    close(f);
  }
  snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(path);
  close(hold[1]);
  waitpid(pid, NULL, 0);
  return fd;
}

/* A detached, read-only clone of src whose owners are shifted by the user namespace. */
static int idmapped_tree(const char *base, const char *count, const char *src) {
  int ns = userns_fd(base, count);
  int tree = syscall(SYS_open_tree, AT_FDCWD, src, RBX_OPEN_TREE_CLONE | O_CLOEXEC | RBX_AT_RECURSIVE);
  if (tree < 0) die("open_tree");
  struct rbx_mount_attr attr = { .attr_set = RBX_MOUNT_ATTR_IDMAP | RBX_MOUNT_ATTR_RDONLY, .userns_fd = (uint64_t)ns };
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | RBX_AT_RECURSIVE, &attr, sizeof attr)) die("mount_setattr(MOUNT_ATTR_IDMAP)");
  close(ns);
  return tree;
}

int main(int argc, char **argv) {
  if (argc == 6 && !strcmp(argv[1], "bind")) {
    /* bind <uid base> <count> <src> <dst>: idmapped read-only bind of src at dst */
    int tree = idmapped_tree(argv[2], argv[3], argv[4]);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, argv[5], RBX_MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount");
    return 0;
  }
  if (argc == 8 && !strcmp(argv[1], "overlay")) {
    /* overlay <uid base> <count> <lower> <upper> <work> <target>: nosuid,nodev overlay whose lower
       layer is an idmapped read-only clone of <lower> that is never attached anywhere else; upper
       and work are passed as given (relative to the cwd keeps host paths out of mountinfo) */
    int tree = idmapped_tree(argv[2], argv[3], argv[4]);
    char opts[3 * 4096];
    int n = snprintf(opts, sizeof opts, "lowerdir=/proc/self/fd/%d,upperdir=%s,workdir=%s", tree, argv[5], argv[6]);
    if (n < 0 || n >= (int)sizeof opts) { fprintf(stderr, "rbx-idmount: paths too long\n"); return 1; }
    if (mount("overlay", argv[7], "overlay", MS_NOSUID | MS_NODEV, opts)) die("mount overlay");
    return 0;
  }
  fprintf(stderr, "usage: rbx-idmount bind BASE COUNT SRC DST | overlay BASE COUNT LOWER UPPER WORK TARGET\n");
  return 2;
}
