#define _GNU_SOURCE
#include "CUbiquitySystem.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <pthread.h>
#include <string.h>
#include <spawn.h>
#include <linux/fs.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static int ubq_renameat2(const char *from, const char *to, unsigned int flags) {
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, flags);
}

int ubq_rename_exchange(const char *first, const char *second) {
    return ubq_renameat2(first, second, RENAME_EXCHANGE);
}

int ubq_rename_noreplace(const char *from, const char *to) {
    return ubq_renameat2(from, to, RENAME_NOREPLACE);
}

int ubq_set_attribute(const char *path, const char *name, const void *value, unsigned long size) {
    return setxattr(path, name, value, size, 0);
}

long ubq_get_attribute(const char *path, const char *name, void *value, unsigned long size) {
    return (long)getxattr(path, name, value, size);
}

int ubq_remove_attribute(const char *path, const char *name) {
    return removexattr(path, name);
}

int ubq_syncfs(int fd) {
    return syncfs(fd);
}

int ubq_clone_file(int destination, int source) {
#ifdef FICLONE
    return ioctl(destination, FICLONE, source);
#else
    (void)destination; (void)source;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

long long ubq_copy_file_range(int source, long long source_offset, int destination, long long destination_offset, unsigned long length) {
    off_t from = (off_t)source_offset, to = (off_t)destination_offset;
    return (long long)copy_file_range(source, &from, destination, &to, (size_t)length, 0);
}

void ubq_start_writeback(int fd, long long offset, long long length) {
    (void)sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE);
}

int ubq_ofd_lock_byte(int fd, long long byte, int exclusive) {
    struct flock lock = {0};
    lock.l_type = exclusive < 0 ? F_UNLCK : (exclusive ? F_WRLCK : F_RDLCK);
    lock.l_whence = SEEK_SET;
    lock.l_start = byte;
    lock.l_len = 1;
    lock.l_pid = 0;
    return fcntl(fd, F_OFD_SETLK, &lock);
}

int ubq_wake_pipe(int fds[2]) {
    return pipe2(fds, O_CLOEXEC | O_NONBLOCK);
}

int ubq_open_marker(const char *directory) {
    return open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int ubq_item_info_in(int directory, const char *name, ubq_item_info *info) {
    struct statx x;
    unsigned int wanted = STATX_TYPE | STATX_SIZE | STATX_MTIME | STATX_CTIME | STATX_BTIME;
    if (statx(directory, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, wanted, &x) != 0) return -1;
    info->is_directory = S_ISDIR(x.stx_mode) ? 1 : 0;
    info->size = (long long)x.stx_size;
    info->modified = (double)x.stx_mtime.tv_sec + (double)x.stx_mtime.tv_nsec / 1e9;
    double changed = (double)x.stx_ctime.tv_sec + (double)x.stx_ctime.tv_nsec / 1e9;
    if (x.stx_mask & STATX_BTIME) {
        info->birth = (double)x.stx_btime.tv_sec + (double)x.stx_btime.tv_nsec / 1e9;
    } else {
        info->birth = changed < info->modified ? changed : info->modified;
    }
    return 0;
}

int ubq_item_info_at(const char *path, ubq_item_info *info) {
    return ubq_item_info_in(AT_FDCWD, path, info);
}

long ubq_read_small_file(int directory, const char *name, void *buffer, unsigned long capacity) {
    int fd = openat(directory, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0) return -1;
    unsigned long total = 0;
    while (total < capacity) {
        ssize_t got = read(fd, (char *)buffer + total, capacity - total);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { int saved = errno; close(fd); errno = saved; return -1; }
        if (got == 0) break;
        total += (unsigned long)got;
    }
    close(fd);
    return (long)total;
}

int ubq_accept_cloexec(int fd) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC);
}

long long ubq_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return (long long)info.uordblks;
}

int ubq_release_free_memory(void) {
#ifdef __GLIBC__
    return malloc_trim(0);
#else
    return 0;
#endif
}

void ubq_limit_retained_memory(int arenas, int mapped_from, int kept) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, mapped_from);
    mallopt(M_TRIM_THRESHOLD, kept);
    if (arenas > 0) mallopt(M_ARENA_MAX, arenas);
#else
    (void)arenas;
    (void)mapped_from;
    (void)kept;
#endif
}

int ubq_spawn_actions_close_from(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

int ubq_spawn_actions_chdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

int ubq_name_this_thread(const char *name) {
    char kept[16];
    strncpy(kept, name, sizeof kept - 1);
    kept[sizeof kept - 1] = 0;
    return pthread_setname_np(pthread_self(), kept);
}
