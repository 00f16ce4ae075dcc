// rbx-idmount: the runtime's mount helper (called by src/runtime/helper.ts).
// `overlay`: mounts a server's overlay with the base image as an idmapped, read-only lower
// layer. runc 1.1 and util-linux 2.38 cannot make idmapped mounts; the kernel can (open_tree +
// mount_setattr(MOUNT_ATTR_IDMAP) with a userns fd). The lower clone is never attached anywhere:
// overlayfs takes it through /proc/self/fd/N, so no extra mount is left to track. Cost: ~4 ms.
// `loop`: mounts a server's disk image through a loop device under a name of ours. The kernel
// keeps mount(2)'s source string as given (the mount's device name in mountinfo and df, also
// inside the server for its binds of the disk), and ext4 resolves it as a path relative to the
// caller's cwd, so the device is mounted through a symlink `<name>` → /dev/loopN in a private
// directory: the server reads `<name>`, not the host's loop number. The device is attached with
// LO_FLAGS_AUTOCLEAR (freed at the last close: the umount) while this process holds it open, so
// a kill at any point leaves no device behind (util-linux's `mount -o loop` does the same).
// `grow`: grows a mounted ext4 online to its device's size (EXT4_IOC_RESIZE_FS, what resize2fs
// does online): resize2fs finds a filesystem's mount only by a device path in /proc/mounts, so it
// takes a disk mounted under our name for unmounted and refuses (EBUSY).
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
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/fs.h>
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

#define RBX_EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)

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

/* Attaches img (open as fd) to a free loop device with autoclear; returns the device's fd open
   (the device stays attached while it is open or mounted) and its number. */
static int attach_loop(int img, int *num) {
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) die("/dev/loop-control");
  for (int tries = 0; tries < 64; tries++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) die("LOOP_CTL_GET_FREE");
    char path[32];
    snprintf(path, sizeof path, "/dev/loop%d", n);
    int dev = open(path, O_RDWR | O_CLOEXEC);
    if (dev < 0) die(path);
    struct loop_config cfg = { .fd = (uint32_t)img, .info = { .lo_flags = LO_FLAGS_AUTOCLEAR } };
    int r = ioctl(dev, LOOP_CONFIGURE, &cfg);
    if (r && (errno == EINVAL || errno == ENOTTY)) {
      /* kernels before 5.8: attach, then set the flag (still held open: nothing is freed yet) */
      r = ioctl(dev, LOOP_SET_FD, img);
      if (!r) {
        struct loop_info64 info = { .lo_flags = LO_FLAGS_AUTOCLEAR };
        if (ioctl(dev, LOOP_SET_STATUS64, &info)) die("LOOP_SET_STATUS64");
      }
    }
    if (!r) {
      close(ctl);
      *num = n;
      return dev;
    }
    if (errno != EBUSY) die("LOOP_CONFIGURE");
    close(dev); /* taken by someone else between GET_FREE and here: next one */
  }
  errno = EBUSY;
  die("no free loop device");
  return -1;
}

/* loop <img> <target> <name>: ext4 of img mounted nosuid,nodev,noatime at target (absolute),
   its source named <name>; runs in a directory where it may make .loop-XXXXXX (removed after) */
static int loop_mount(const char *img_path, const char *target, const char *name) {
  if (target[0] != '/' || !name[0] || strchr(name, '/')) { fprintf(stderr, "rbx-idmount: loop wants an absolute target and a plain name\n"); return 2; }
  int img = open(img_path, O_RDWR | O_CLOEXEC);
  if (img < 0) die(img_path);
  int num;
  int dev = attach_loop(img, &num);
  close(img);
  char dir[] = ".loop-XXXXXX", devpath[32];
  if (!mkdtemp(dir)) die("mkdtemp");
  snprintf(devpath, sizeof devpath, "/dev/loop%d", num);
  int here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (here < 0) die("open .");
  int ok = 0, err = 0;
  if (chdir(dir) == 0) {
    if (symlink(devpath, name) == 0) {
      ok = mount(name, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) == 0;
      err = errno;
      unlink(name);
    } else err = errno;
  } else err = errno;
  if (fchdir(here)) die("fchdir");
  rmdir(dir);
  close(dev); /* mounted: the mount holds the device; not mounted: autoclear detaches it now */
  if (!ok) {
    errno = err;
    die("mount ext4");
  }
  return 0;
}

/* grow <mountpoint> <device>: the ext4 mounted at mountpoint, which must be on device, grown to
   the device's size */
static int grow(const char *mp, const char *devpath) {
  int dev = open(devpath, O_RDONLY | O_CLOEXEC);
  if (dev < 0) die(devpath);
  int fd = open(mp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) die(mp);
  struct stat sd, sm;
  struct statfs sf;
  uint64_t bytes;
  if (fstat(dev, &sd) || fstat(fd, &sm) || fstatfs(fd, &sf)) die("stat");
  if (!S_ISBLK(sd.st_mode) || sd.st_rdev != sm.st_dev) { fprintf(stderr, "rbx-idmount: %s is not mounted from %s\n", mp, devpath); return 1; }
  if (ioctl(dev, BLKGETSIZE64, &bytes)) die("BLKGETSIZE64");
  uint64_t blocks = bytes / (uint64_t)sf.f_bsize;
  if (ioctl(fd, RBX_EXT4_IOC_RESIZE_FS, &blocks)) die("EXT4_IOC_RESIZE_FS");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "grow")) return grow(argv[2], argv[3]);
  if (argc == 5 && !strcmp(argv[1], "loop")) return loop_mount(argv[2], argv[3], argv[4]);
  if (argc == 6 && !strcmp(argv[1], "bind")) {
    /* bind <uid base> <count> <src> <dst>: idmapped read-only bind of src at dst */
    int tree = idmapped_tree(argv[2], argv[3], argv[4]);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, argv[5], RBX_MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount");
    return 0;
  }
  if (argc == 8 && !strcmp(argv[1], "overlay")) {
    /* overlay <uid base> <count> <lower> <upper> <work> <target>: nosuid,nodev,noatime overlay whose lower
       layer is an idmapped read-only clone of <lower> that is never attached anywhere else; upper
       and work are passed as given (relative to the cwd keeps host paths out of mountinfo) */
    int tree = idmapped_tree(argv[2], argv[3], argv[4]);
    char opts[3 * 4096];
    int n = snprintf(opts, sizeof opts, "lowerdir=/proc/self/fd/%d,upperdir=%s,workdir=%s", tree, argv[5], argv[6]);
    if (n < 0 || n >= (int)sizeof opts) { fprintf(stderr, "rbx-idmount: paths too long\n"); return 1; }
    if (mount("overlay", argv[7], "overlay", MS_NOSUID | MS_NODEV | MS_NOATIME, opts)) die("mount overlay");
    return 0;
  }
  fprintf(stderr, "usage: rbx-idmount bind BASE COUNT SRC DST | overlay BASE COUNT LOWER UPPER WORK TARGET | loop IMG TARGET NAME | grow MOUNTPOINT DEVICE\n");
  return 2;
}
