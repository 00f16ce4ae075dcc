// rbx-exec: tells a command killed by a signal apart from one that exited with 128+n, which
// `runc exec` cannot (it exits 128+n in both cases). Static, so it runs inside any server's image
// (src/runtime/execwrap.ts puts it in the init directory every container sees at /run/rootbox).
// Two modes:
//   run CMD ARGS...   inside a server (the process `runc exec` starts): runs CMD as its child in
//                     its own process group (the terminal's foreground group on a terminal),
//                     forwards every signal it receives to that group, and when CMD ends writes
//                     "exit N" or "signal N [core]" to fd 3 (passed by `runc exec --preserve-fds 1`)
//                     and exits N or 128+N like a shell would. fd 3 is close-on-exec for CMD.
//   relay NAME TOKEN CMD ARGS...   on the host, for PTY execs (node-pty passes no extra fd):
//                     connects to the daemon's abstract unix socket NAME, sends TOKEN, makes the
//                     connection fd 3 and execs CMD (runc). fd 3 is /dev/null when that fails.
// Built by `npm run build` (build.mjs, run by scripts/setup) into dist/bin/rbx-exec-<hash of this
// file>, with the flags of the next line.
// cflags: -O2 -Wall -static

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int run_child(char **argv) {
  int report = fcntl(3, F_GETFD) >= 0 ? 3 : -1;
  if (report >= 0) fcntl(3, F_SETFD, FD_CLOEXEC);
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid < 0) { perror("rbx-exec: fork"); return 126; }
  if (pid == 0) {
    setpgid(0, 0);
    if (isatty(0)) {
      struct sigaction ign = { .sa_handler = SIG_IGN }, prev;
      sigaction(SIGTTOU, &ign, &prev);
      tcsetpgrp(0, getpid());
      sigaction(SIGTTOU, &prev, NULL);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "rbx-exec: %s: %s\n", argv[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }
  setpgid(pid, pid);
  int st = 0;
  for (;;) {
    siginfo_t si;
    int sig = sigwaitinfo(&all, &si);
    if (sig < 0) continue;
    if (sig == SIGCHLD) {
      pid_t r;
      while ((r = waitpid(-1, &st, WNOHANG)) > 0)
        if (r == pid) goto done;
      continue;
    }
    if (kill(-pid, sig) < 0) kill(pid, sig);
  }
done:
  if (WIFSIGNALED(st)) {
    int s = WTERMSIG(st);
    if (report >= 0) dprintf(report, "signal %d%s\n", s, WCOREDUMP(st) ? " core" : "");
    return 128 + s;
  }
  if (report >= 0) dprintf(report, "exit %d\n", WEXITSTATUS(st));
  return WEXITSTATUS(st);
}

/* Abstract address NAME: exact length, then NUL-padded to the whole sun_path (how libuv before
   uv_pipe_bind2 binds it). */
static int connect_abstract(const char *name) {
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  size_t n = strlen(name);
  if (n >= sizeof a.sun_path - 1) return -1;
  memcpy(a.sun_path + 1, name, n);
  socklen_t lens[2] = { (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n), (socklen_t)sizeof a };
  for (int i = 0; i < 2; i++) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    if (connect(s, (struct sockaddr *)&a, lens[i]) == 0) return s;
    close(s);
  }
  return -1;
}

static int relay(const char *name, const char *token, char **argv) {
  int s = connect_abstract(name);
  int ok = s >= 0 && dprintf(s, "%s\n", token) > 0;
  if (!ok) {
    if (s >= 0) close(s);
    s = open("/dev/null", O_WRONLY | O_CLOEXEC);
  }
  if (s != 3) { dup2(s, 3); close(s); }
  else fcntl(3, F_SETFD, 0);
  execvp(argv[0], argv);
  fprintf(stderr, "rbx-exec: %s: %s\n", argv[0], strerror(errno));
  return 127;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "run")) return run_child(argv + 2);
  if (argc >= 5 && !strcmp(argv[1], "relay")) return relay(argv[2], argv[3], argv + 4);
  fprintf(stderr, "usage: rbx-exec run CMD [ARG...] | relay NAME TOKEN CMD [ARG...]\n");
  return 2;
}
