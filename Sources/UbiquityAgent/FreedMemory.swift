import CUbiquitySystem

/// Hands the heap's free memory back to the system after a large piece of work.
///
/// glibc's allocator keeps what a program frees in its arenas (one per thread that allocated,
/// up to eight per core) and gives it back only from the top of the main heap: after a round
/// that brought 10,000 items down, an agent kept tens of megabytes it no longer used (32 MB at
/// 100,000 items, measured with `malloc_trim` called from gdb). `malloc_trim` releases the free
/// pages of every arena.
enum FreedMemory {
    /// How many items a round must have handled for its freed memory to be handed back.
    static let threshold = 1_000

    /// Called once at the start of the process: blocks of 1 MiB and more are always given
    /// back when freed, at most 8 MiB of free memory stays at the top of a heap, and threads
    /// share a few arenas (glibc: see ``ubq_limit_retained_memory``). Chunks — 2 KiB to
    /// 512 KiB, and their sealed copies — come from the heap and reuse what the last freed:
    /// mapped afresh each (blocks from 128 KiB were, once), their pages' faults and zeroing were
    /// a third of a sealing agent's CPU for a new 64 MiB file (docs/Benchmarks.md).
    static func limitRetained() {
        ubq_limit_retained_memory(2, 1 << 20, 8 << 20)
    }

    /// Gives free heap pages back to the system (nothing where the C library is not glibc).
    static func release() {
        _ = ubq_release_free_memory()
    }
}
