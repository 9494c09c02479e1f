#ifndef C_UBIQUITY_SYSTEM_H
#define C_UBIQUITY_SYSTEM_H

/// Atomically exchanges the two paths (renameat2 with RENAME_EXCHANGE). Returns 0 or -1 with errno set.
int ubq_rename_exchange(const char *first, const char *second);

/// Renames `from` to `to` only if `to` does not exist (RENAME_NOREPLACE). Returns 0 or -1 with errno set.
int ubq_rename_noreplace(const char *from, const char *to);

/// Makes `destination` share `source`'s extents (FICLONE, a reflink). Returns 0 or -1 with errno set.
int ubq_clone_file(int destination, int source);

#endif
