// rbx-lock: holds a daemon's host-name locks for as long as the daemon lives (Node has no flock).
//   rbx-lock DIR NAME...     (no NAME: only reports the live locks, for `rootbox doctor`)
// Takes DIR/start.lock (blocking: one daemon's start-up check at a time), then DIR/NAME.lock for
// every NAME with flock(LOCK_EX|LOCK_NB). Any of them held by another process: prints
// "busy NAME..." and exits 3. Otherwise probes every other DIR/*.lock (a shared non-blocking
// flock: refused = another live holder) and prints "live NAME" for each, then "held". It lets go
// of start.lock at the first line on stdin ("go", once the daemon wrote its record) and exits at
// end of stdin — the daemon's end, however it ended (a kill -9 closes the pipe too; and
// PR_SET_PDEATHSIG kills the helper with its parent). The locks go with the process: nothing
// stale is left behind. Built by `npm run build` into dist/bin/rbx-lock-<hash of this file>.
// cflags: -O2 -Wall

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

static int open_lock(const char *dir, const char *name, int flags) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s.lock", dir, name) >= (int)sizeof path) return -1;
  return open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0644);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: rbx-lock DIR [NAME...]\n");
    return 2;
  }
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 1;
  const char *dir = argv[1];
  int start = open_lock(dir, "start", O_RDWR | O_CREAT);
  if (start < 0 || flock(start, LOCK_EX) != 0) {
    fprintf(stderr, "rbx-lock: %s/start.lock: %s\n", dir, strerror(errno));
    return 1;
  }
  int busy = 0;
  for (int i = 2; i < argc; i++) {
    int fd = open_lock(dir, argv[i], O_RDWR | O_CREAT);
    if (fd < 0) {
      fprintf(stderr, "rbx-lock: %s/%s.lock: %s\n", dir, argv[i], strerror(errno));
      return 1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) {
        fprintf(stderr, "rbx-lock: flock %s: %s\n", argv[i], strerror(errno));
        return 1;
      }
      printf(busy++ ? " %s" : "busy %s", argv[i]);
    }
  }
  if (busy) {
    printf("\n");
    return 3;
  }
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n <= 5 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(n - 5), e->d_name);
    int own = !strcmp(name, "start");
    for (int i = 2; i < argc && !own; i++) own = !strcmp(name, argv[i]);
    if (own) continue;
    int fd = open_lock(dir, name, O_RDONLY);
    if (fd < 0) continue;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) printf("live %s\n", name);
    close(fd);
  }
  if (d) closedir(d);
  printf("held\n");
  fflush(stdout);
  char buf[256];
  ssize_t r = read(0, buf, sizeof buf);
  close(start);
  while (r > 0 || (r < 0 && errno == EINTR)) r = read(0, buf, sizeof buf);
  return 0;
}
