#ifndef C_UBIQUITY_SYSTEM_H
#define C_UBIQUITY_SYSTEM_H

#include <spawn.h>

/// Atomically exchanges the two paths (renameat2 with RENAME_EXCHANGE). Returns 0 or -1 with errno set.
int ubq_rename_exchange(const char *first, const char *second);

/// Renames `from` to `to` only if `to` does not exist (RENAME_NOREPLACE). Returns 0 or -1 with errno set.
int ubq_rename_noreplace(const char *from, const char *to);

/// Writes back everything of the file system that holds `fd` (syncfs): one flush for many
/// files written together, instead of an fsync each. Returns 0 or -1 with errno set.
int ubq_syncfs(int fd);

/// Sets, reads and removes an extended attribute of `path` (following symbolic links), as
/// setxattr/getxattr/removexattr do: 0 (or the value's length) or -1 with errno set.
int ubq_set_attribute(const char *path, const char *name, const void *value, unsigned long size);
long ubq_get_attribute(const char *path, const char *name, void *value, unsigned long size);
int ubq_remove_attribute(const char *path, const char *name);

/// Keeps a long-lived process's heap from holding much freed memory (glibc only; elsewhere
/// nothing): blocks of `mapped_from` bytes and more are always mapped on their own and unmapped
/// when freed (glibc otherwise raises that threshold to the largest block freed, up to 32 MiB,
/// and later large blocks then fragment the heap), at most `kept` free bytes stay at the top of
/// a heap for the next blocks, and at most `arenas` arenas are made (0 or less: glibc's number).
void ubq_limit_retained_memory(int arenas, int mapped_from, int kept);

/// Gives the free memory of every heap arena back to the system (glibc's malloc_trim(0));
/// returns whether any was. Does nothing where the C library is not glibc.
int ubq_release_free_memory(void);

/// Makes `destination` share `source`'s extents (FICLONE, a reflink). Returns 0 or -1 with errno set.
int ubq_clone_file(int destination, int source);

/// Copies `length` bytes from `source` at `source_offset` to `destination` at
/// `destination_offset` inside the kernel (copy_file_range; no file offset moves; the file
/// system may share the blocks). Returns the bytes copied (possibly fewer; 0 at the source's
/// end), or -1 with errno set.
long long ubq_copy_file_range(int source, long long source_offset, int destination, long long destination_offset, unsigned long length);

/// Starts writing back the dirty pages of `fd` in the range, without waiting
/// (sync_file_range with SYNC_FILE_RANGE_WRITE): a later fsync has less to wait for. Only a
/// hint: failures are ignored (the fsync reports real trouble).
void ubq_start_writeback(int fd, long long offset, long long length);

/// Takes (or, with `exclusive` < 0, releases) an open-file-description lock on one byte of
/// `fd` without waiting (F_OFD_SETLK). OFD locks belong to the open file description: they
/// conflict between descriptors even within one process, and the kernel drops them when the
/// last descriptor closes — also when the process is killed. Returns 0, or -1 with errno set
/// (EAGAIN/EACCES when another holder conflicts).
int ubq_ofd_lock_byte(int fd, long long byte, int exclusive);

/// Makes a pipe whose ends are close-on-exec and non-blocking (pipe2), for waking a thread
/// that waits in poll. Returns 0, or -1 with errno set.
int ubq_wake_pipe(int fds[2]);

/// Names the calling thread (`top -H`, `/proc/PID/task/TID/comm`): at most 15 bytes of
/// `name` are kept (the kernel refuses a longer name, which is why Foundation's `Thread.name`
/// of more left a thread with its creator's name; names are not needed: the result may be
/// ignored). Returns 0, or an errno value.
int ubq_name_this_thread(const char *name);

/// Opens an unnamed, close-on-exec file in `directory` (O_TMPFILE): a private marker whose
/// changes an inotify watch (on /proc/self/fd/N) reports in order with other events. Returns
/// the descriptor, or -1 with errno set.
int ubq_open_marker(const char *directory);

/// What a metadata query needs of an item, from one statx call.
typedef struct {
    int is_directory;
    long long size;
    double modified;
    /// The birth time; where the file system does not keep one, the earlier of the last
    /// status change and the last modification.
    double birth;
} ubq_item_info;

/// Fills `info` for the item at `path` (not following a final symbolic link). Returns 0, or
/// -1 with errno set.
int ubq_item_info_at(const char *path, ubq_item_info *info);

/// The same for the entry `name` of the open folder `directory` (no path walk: what a folder
/// walk calls for each entry). Returns 0, or -1 with errno set.
int ubq_item_info_in(int directory, const char *name, ubq_item_info *info);

/// Reads at most `capacity` bytes of the file `name` in the open folder `directory` (not
/// following a symbolic link) into `buffer`, retrying interrupted reads. Returns the number of
/// bytes read (`capacity` when the file may be longer), or -1 with errno set.
long ubq_read_small_file(int directory, const char *name, void *buffer, unsigned long capacity);

/// Accepts a connection on `fd` with the new descriptor close-on-exec (accept4). Returns the
/// descriptor, or -1 with errno set.
int ubq_accept_cloexec(int fd);

/// Bytes the process's malloc heap has in use (glibc's mallinfo2), for measurements.
long long ubq_heap_in_use(void);

/// Adds to `actions` closing every descriptor from `lowest` up in the child
/// (posix_spawn_file_actions_addclosefrom_np, glibc 2.34+), and changing its working folder
/// (posix_spawn_file_actions_addchdir_np): 0 or an error number. (GNU extensions, which Swift's
/// Glibc module does not show.)
int ubq_spawn_actions_close_from(posix_spawn_file_actions_t *actions, int lowest);
int ubq_spawn_actions_chdir(posix_spawn_file_actions_t *actions, const char *path);

/// Whether this program's async entry point (an `async` `main` or top-level `await`) drains
/// the main queue through the main run loop on the main thread, as on Apple's systems (a hook
/// installed before `main`; not when `UBIQUITY_ASYNC_MAIN=dispatch` or another library's hook
/// came first): 1 or 0.
int ubq_async_main_drains_main_run_loop(void);

#endif
