// The seccomp profile of every server (runc's default spec has none). A deny list on top of an
// allow-by-default policy: the user is root in a full Debian system and should be able to run
// what Debian runs, but not the calls that reach past the container (namespaces, mounts, kernel
// modules, kexec, bpf, perf, keyrings, reboot, swap, handle-based opens, io_uring, …).
// Denied calls fail with EPERM (clone3 with ENOSYS so glibc falls back to clone, which is then
// filtered by its flags). The filter covers the x86_64, x86 and x32 ABIs so a 32-bit call
// cannot walk around it.

const EPERM = 1;
const ENOSYS = 38;

/** Syscalls no server may make. */
export const DENIED_SYSCALLS = [
  // mounts and the new mount API
  'mount',
  'umount',
  'umount2',
  'pivot_root',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'open_tree',
  'move_mount',
  'mount_setattr',
  // namespaces
  'unshare',
  'setns',
  // kernel code, kexec, reboot
  'kexec_load',
  'kexec_file_load',
  'init_module',
  'finit_module',
  'delete_module',
  'reboot',
  // bpf, perf, tracing the kernel
  'bpf',
  'perf_event_open',
  'lookup_dcookie',
  // kernel keyrings (not namespaced)
  'keyctl',
  'add_key',
  'request_key',
  // swap, accounting, quotas, clock, syslog
  'swapon',
  'swapoff',
  'acct',
  'quotactl',
  'quotactl_fd',
  'settimeofday',
  'clock_settime',
  'clock_adjtime',
  'adjtimex',
  'syslog',
  // handle-based opens (the classic container escape), userfaultfd, io_uring, raw io ports
  'open_by_handle_at',
  'name_to_handle_at',
  'userfaultfd',
  'io_uring_setup',
  'io_uring_enter',
  'io_uring_register',
  'iopl',
  'ioperm',
  'vm86',
  'vm86old',
  'nfsservctl',
  'uselib',
] as const;

/** clone() flags that create namespaces; clone() with any of them set is denied. */
const CLONE_NS_FLAGS = {
  CLONE_NEWNS: 0x00020000,
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
};

export interface SeccompProfile {
  defaultAction: string;
  architectures: string[];
  syscalls: { names: string[]; action: string; errnoRet?: number; args?: { index: number; value: number; valueTwo: number; op: string }[] }[];
}

export function seccompProfile(): SeccompProfile {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: [...DENIED_SYSCALLS], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      // One rule per flag: the conditions inside one rule are ANDed, separate rules are ORed.
      ...Object.values(CLONE_NS_FLAGS).map((flag) => ({
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
    ],
  };
}
