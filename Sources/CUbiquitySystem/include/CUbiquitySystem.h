#ifndef C_UBIQUITY_SYSTEM_H
#define C_UBIQUITY_SYSTEM_H

/// Atomically exchanges the two paths (renameat2 with RENAME_EXCHANGE). Returns 0 or -1 with errno set.
int ubq_rename_exchange(const char *first, const char *second);

/// Renames `from` to `to` only if `to` does not exist (RENAME_NOREPLACE). Returns 0 or -1 with errno set.
int ubq_rename_noreplace(const char *from, const char *to);

/// Makes `destination` share `source`'s extents (FICLONE, a reflink). Returns 0 or -1 with errno set.
int ubq_clone_file(int destination, int source);

/// Takes (or, with `exclusive` < 0, releases) an open-file-description lock on one byte of
/// `fd` without waiting (F_OFD_SETLK). OFD locks belong to the open file description: they
/// conflict between descriptors even within one process, and the kernel drops them when the
/// last descriptor closes — also when the process is killed. Returns 0, or -1 with errno set
/// (EAGAIN/EACCES when another holder conflicts).
int ubq_ofd_lock_byte(int fd, long long byte, int exclusive);

/// Makes a pipe whose ends are close-on-exec and non-blocking (pipe2), for waking a thread
/// that waits in poll. Returns 0, or -1 with errno set.
int ubq_wake_pipe(int fds[2]);

/// Opens an unnamed, close-on-exec file in `directory` (O_TMPFILE): a private marker whose
/// changes an inotify watch (on /proc/self/fd/N) reports in order with other events. Returns
/// the descriptor, or -1 with errno set.
int ubq_open_marker(const char *directory);

/// The birth time of the item at `path` (not following a final symbolic link), from statx.
/// Returns 0 and fills `seconds`/`nanoseconds`, or -1 with errno set (ENODATA when the file
/// system does not record it).
int ubq_birth_time(const char *path, long long *seconds, long *nanoseconds);

#endif
