// An async entry point drains the main queue on the main thread, through the main run loop, as
// on Apple's systems.
//
// Swift's runtime ends an `async` `main` (or top-level `await`) by draining the main queue: on
// Apple's systems with CFRunLoopRun on the main thread, on Linux with dispatch_main, which parks
// the main thread and lets worker threads drain the queue. swift-corelibs-foundation then cannot
// tell main-queue work from any other (`OperationQueue.current` is not `.main` there), so a
// notification posted from main-queue work to an observer added with `queue: .main` is queued
// behind the very work that waits for it, and the program hangs. The runtime offers a hook for
// this step; installing it before `main` runs makes Linux do what Apple's systems do.
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "CUbiquitySystem.h"

typedef void (*ubq_drain_original)(void) __attribute__((swiftcall));
typedef void (*ubq_drain_override)(ubq_drain_original) __attribute__((swiftcall));
typedef void (*ubq_drain_hook)(ubq_drain_original, ubq_drain_override) __attribute__((swiftcall));

// The runtime's hook (libswift_Concurrency); weak, so that a program without it still links.
extern ubq_drain_hook swift_task_asyncMainDrainQueue_hook __attribute__((weak));

static int installed = 0;

__attribute__((swiftcall)) static void ubq_drain_main_queue(ubq_drain_original original, ubq_drain_override compatibility) {
    // Foundation's CoreFoundation is in every program that imports Ubiquity; found at run time
    // so that this file needs no link to it.
    void (*run)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "CFRunLoopRun");
    if (run != NULL) run();
    // The run loop was stopped (or is not there): the runtime's own way, which never returns.
    if (compatibility != NULL) compatibility(original); else original();
}

__attribute__((constructor)) static void ubq_install_main_queue_drain(void) {
    const char *choice = getenv("UBIQUITY_ASYNC_MAIN");
    if (choice != NULL && strcmp(choice, "dispatch") == 0) return;
    // A hook another library installed first is left alone.
    if (&swift_task_asyncMainDrainQueue_hook == NULL || swift_task_asyncMainDrainQueue_hook != NULL) return;
    swift_task_asyncMainDrainQueue_hook = ubq_drain_main_queue;
    installed = 1;
}

int ubq_async_main_drains_main_run_loop(void) {
    return installed;
}
