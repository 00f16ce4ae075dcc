// rbx-freeze: a crash-consistent copy of a server's disk image with its filesystem frozen for as
// short as possible (checkpoints, issue 37). One process does the whole pause, so no process is
// started while the server's writes wait.
//   rbx-freeze MOUNT IMAGE DEST [reflink|copy]
// syncfs(MOUNT) first (the dirty pages flushed while the server still runs), then FIFREEZE on
// MOUNT (the server's own loop-mounted ext4, never the host's), DEST made from IMAGE — FICLONE
// (a reflink: milliseconds on XFS/btrfs whatever the size) unless `copy` is asked or the data
// dir refuses it, else a sparse copy (SEEK_DATA/SEEK_HOLE + copy_file_range: holes stay holes) —
// and FITHAW, always. DEST is created (O_EXCL) and removed on failure.
// Prints: "ok <paused µs> <reflink|copy> <IMAGE's mtime: seconds> <nanoseconds>", then one line
// "<start> <end>" per data range of DEST
// (SEEK_DATA/SEEK_HOLE) and "end" once they are all listed. IMAGE's mtime is read the instant the
// thaw returns (the thaw's own superblock write in it): what the copy holds is the image as of that
// mtime, and a write after it moves it (a later reader compares). Not before FITHAW: the thaw
// commits ext4's superblock through the loop device, which moves the image's mtime past a stamp
// read while frozen (by 4 to 80 ms in tests), so every checkpoint would read as changed at once —
// none skipped at a sleep, none reused by a move, every stopped server checkpointed again at each
// tick (test/checkpoints/writtenat fails so). What the freeze held reaches the image only once its
// write is flushed (an fsync, the writeback) after the thaw woke it; one that did so between the
// thaw and the fstat below (this process held in that one system call's gap) would count as in the
// copy — a window left open, not testable deterministically. Exit 0; 1 with a message on stderr on
// failure. Killed between freeze
// and thaw, the disk stays frozen: the runtime's marker file makes the next start thaw it.
// Built by `npm run build` into dist/bin/rbx-freeze-<hash of this file>.
// cflags: -O2 -Wall

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/** Copies the data ranges of src into dst (same offsets); holes are left as holes. */
static int sparse_copy(int src, int dst, off_t size) {
  if (ftruncate(dst, size) != 0) return -1;
  off_t pos = 0;
  while (pos < size) {
    off_t data = lseek(src, pos, SEEK_DATA);
    if (data < 0) return errno == ENXIO ? 0 : -1;
    off_t hole = lseek(src, data, SEEK_HOLE);
    if (hole < 0) return -1;
    off64_t in = data, out = data;
    while (in < hole) {
      ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
      if (n < 0) return -1;
      if (n == 0) break;
    }
    pos = hole;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 5) {
    fprintf(stderr, "usage: rbx-freeze MOUNT IMAGE DEST [reflink|copy]\n");
    return 2;
  }
  int want_reflink = argc < 5 || strcmp(argv[4], "copy") != 0;
  int mnt = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int src = open(argv[2], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (mnt < 0 || src < 0) {
    fprintf(stderr, "rbx-freeze: open: %s\n", strerror(errno));
    return 1;
  }
  int dst = open(argv[3], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (dst < 0) {
    fprintf(stderr, "rbx-freeze: create %s: %s\n", argv[3], strerror(errno));
    return 1;
  }
  syncfs(mnt);
  long long t0 = now_us();
  if (ioctl(mnt, FIFREEZE, 0) != 0) {
    fprintf(stderr, "rbx-freeze: freeze: %s\n", strerror(errno));
    unlink(argv[3]);
    return 1;
  }
  const char *method = "reflink";
  int rc = want_reflink ? ioctl(dst, FICLONE, src) : -1;
  int err = 0;
  if (rc != 0) {
    struct stat st;
    method = "copy";
    rc = fstat(src, &st) == 0 ? sparse_copy(src, dst, st.st_size) : -1;
    err = errno;
  }
  int thawed = ioctl(mnt, FITHAW, 0);
  struct stat img;
  int stated = fstat(src, &img);
  long long paused = now_us() - t0;
  if (rc != 0 || fsync(dst) != 0) {
    fprintf(stderr, "rbx-freeze: copy: %s\n", strerror(err ? err : errno));
    unlink(argv[3]);
    return 1;
  }
  if (thawed != 0) {
    fprintf(stderr, "rbx-freeze: thaw: %s\n", strerror(errno));
    return 1;
  }
  if (stated != 0) {
    fprintf(stderr, "rbx-freeze: stat %s: %s\n", argv[2], strerror(errno));
    unlink(argv[3]);
    return 1;
  }
  printf("ok %lld %s %lld %ld\n", paused, method, (long long)img.st_mtim.tv_sec, (long)img.st_mtim.tv_nsec);
  struct stat st;
  if (fstat(dst, &st) != 0) return 1;
  int rd = open(argv[3], O_RDONLY | O_CLOEXEC);
  int whole = rd >= 0; // every range listed: "end" says so (without it the caller reads every chunk)
  for (off_t pos = 0; whole && pos < st.st_size;) {
    off_t data = lseek(rd, pos, SEEK_DATA);
    if (data < 0) {
      whole = errno == ENXIO; // no data past pos
      break;
    }
    off_t hole = lseek(rd, data, SEEK_HOLE);
    if (hole < 0) {
      whole = 0;
      break;
    }
    printf("%lld %lld\n", (long long)data, (long long)hole);
    pos = hole;
  }
  if (whole) printf("end\n");
  return 0;
}
