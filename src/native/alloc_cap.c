/* alloc_cap.c: libportal_alloc.so, the memory tripwire's allocation check
 * (docs/architecture.md "The resident cap").
 *
 * portal-run preloads it (LD_PRELOAD) into the interpreter only, under the
 * resident cap; the bootstrap gives the program the user's own LD_PRELOAD back
 * (boot.py), so exec'd children never have it, fork children (DataLoader
 * workers) do.
 *
 * One request of kBigRequest bytes or more through malloc, realloc (its
 * growth), posix_memalign, aligned_alloc, memalign, valloc or pvalloc is
 * refused (NULL, errno ENOMEM: a MemoryError inside Python, the tripwire's
 * ordinary rescue) when the process's resident memory plus the request would
 * pass the cap that portal-run names in PORTAL_MEMORY_CAP.  Such memory is
 * written at once as a rule (np.ones, torch.ones, b"x" * n): passed through, it
 * could take the machine's last memory inside one C call, before the resident
 * watcher's request reaches a safe point, and the kernel's OOM killer would end
 * the job.  calloc is not checked: its big requests are zero pages that cost
 * nothing until written (np.zeros, bytes(n)), as under python; memory written
 * bit by bit is the resident watcher's (memory_watch.cpp).  Anonymous mmap is
 * not checked either, for the same reason.
 *
 * Any smaller request costs one compare.  The slow path reads /proc/self/statm
 * with open/read/close only: no allocation, safe in a fork child and from any
 * thread.  The next allocator (glibc's, or one the user preloaded after this
 * one) is found with dlsym(RTLD_NEXT) on first use.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "portal/env_contract.h"   /* generated: contract/job_record.json */

/* The smallest request that is checked: below it a request cannot pass the
 * cap's reserve (256 MiB at least, tripwire.hpp) by itself. */
#define kBigRequest ((size_t)64 << 20)
#define kCapVariable PORTAL_ENV_MEMORY_CAP
/* statm's fields: size resident shared ...; 7 decimal numbers fit. */
#define kStatmBytes 256

typedef void *(*malloc_fn)(size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*aligned_fn)(size_t, size_t);
typedef void *(*valloc_fn)(size_t);
typedef size_t (*usable_fn)(void *);

/* glibc's own entry points, used only while dlsym itself allocates (it does
 * not, in the glibc versions tested, on success). */
extern void *__libc_malloc(size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static malloc_fn next_malloc;
static realloc_fn next_realloc;
static posix_memalign_fn next_posix_memalign;
static aligned_fn next_aligned_alloc;
static aligned_fn next_memalign;
static valloc_fn next_valloc;
static valloc_fn next_pvalloc;
static usable_fn next_usable_size;

static uint64_t cap_bytes;   /* 0: no cap named, nothing is refused */
static uint64_t page_bytes = 4096;
static int resolving;

static void resolve(void) {
    if (next_malloc != NULL) return;
    resolving = 1;
    next_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
    next_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    next_aligned_alloc = (aligned_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    next_memalign = (aligned_fn)dlsym(RTLD_NEXT, "memalign");
    next_valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
    next_pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
    next_usable_size = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
    /* Last: the others are resolved once next_malloc is. */
    next_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
    resolving = 0;
}

static uint64_t parse_decimal(const char *text) {
    uint64_t value = 0;
    if (text == NULL || *text == '\0') return 0;
    for (; *text != '\0'; ++text) {
        if (*text < '0' || *text > '9') return 0;
        if (value > (UINT64_MAX - 9) / 10) return 0;
        value = value * 10 + (uint64_t)(*text - '0');
    }
    return value;
}

__attribute__((constructor)) static void alloc_cap_init(void) {
    const long page = sysconf(_SC_PAGE_SIZE);
    if (page > 0) page_bytes = (uint64_t)page;
    cap_bytes = parse_decimal(getenv(kCapVariable));
    resolve();
}

/* Resident memory less file-backed shared pages, as the watcher counts it
 * (memory_watch.cpp); 0 when it cannot be read (then nothing is refused). */
static uint64_t resident_bytes(void) {
    char buf[kStatmBytes];
    const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    uint64_t field[3] = {0, 0, 0};
    const char *p = buf;
    for (int i = 0; i < 3; ++i) {
        while (*p == ' ') ++p;
        if (*p < '0' || *p > '9') return 0;
        while (*p >= '0' && *p <= '9') field[i] = field[i] * 10 + (uint64_t)(*p++ - '0');
    }
    const uint64_t shared = field[2] < field[1] ? field[2] : field[1];
    return (field[1] - shared) * page_bytes;
}

/* Whether a big request of `grow` more bytes must be refused. */
static int refused(uint64_t grow) {
    if (cap_bytes == 0) return 0;
    if (grow > cap_bytes) return 1;
    const uint64_t resident = resident_bytes();
    return resident > cap_bytes - grow;
}

/* Whether a request of `size` bytes is big and must be refused; sets errno to
 * ENOMEM when it is, as the allocator's own failure does. */
static int big_refused(size_t size) {
    if (size < kBigRequest || !refused(size)) return 0;
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_malloc(size);
        resolve();
    }
    if (big_refused(size)) return NULL;
    return next_malloc(size);
}

void *realloc(void *old, size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_realloc(old, size);
        resolve();
    }
    if (size < kBigRequest) return next_realloc(old, size);
    const size_t had = old != NULL && next_usable_size != NULL ? next_usable_size(old) : 0;
    if (size > had && refused(size - had)) {
        errno = ENOMEM;  /* the old block is left as it was, as realloc's failure does */
        return NULL;
    }
    return next_realloc(old, size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    if (next_malloc == NULL) {
        if (resolving) {
            *out = __libc_memalign(alignment, size);
            return *out != NULL ? 0 : ENOMEM;
        }
        resolve();
    }
    if (size >= kBigRequest && refused(size)) return ENOMEM;  /* *out untouched, as on failure */
    return next_posix_memalign(out, alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_memalign(alignment, size);
        resolve();
    }
    if (big_refused(size)) return NULL;
    return next_aligned_alloc(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_memalign(alignment, size);
        resolve();
    }
    if (big_refused(size)) return NULL;
    return next_memalign(alignment, size);
}

void *valloc(size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_valloc(size);
        resolve();
    }
    if (big_refused(size)) return NULL;
    return next_valloc(size);
}

void *pvalloc(size_t size) {
    if (next_malloc == NULL) {
        if (resolving) return __libc_pvalloc(size);
        resolve();
    }
    if (big_refused(size)) return NULL;
    return next_pvalloc(size);
}
