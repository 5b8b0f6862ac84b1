/*
 * LD_PRELOAD shim for Debian bookworm's user-mode-linux (6.1) on hosts whose
 * XSAVE area is larger than UML's FP buffer (AVX-512 / AMX CPUs).
 *
 * Host kernels reject PTRACE_SETREGSET(NT_X86_XSTATE) unless the buffer is the
 * full XSAVE size (arch/x86/kernel/fpu/regset.c: count != fpu_user_cfg.max_size
 * -> EFAULT), so UML 6.1 dies with "ptrace set fp regs failed, errno = 14".
 *
 * Fix: on GETREGSET keep a full-size copy of the state keyed by UML's buffer
 * address (one buffer per guest thread); on SETREGSET rebuild a full-size
 * buffer from that copy with UML's (shorter) buffer laid over its head.
 * Everything else is passed straight through to glibc's ptrace().
 *
 * Loaded into linux.uml only (tests/nfs/uml.py builds it under its state dir with gcc). Harmless
 * on a CPU whose XSAVE area fits UML's buffer. AMX tile state is not switched between threads of
 * one guest process (Python does not use it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <cpuid.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif
#define MAXX (64 * 1024)
#define NSLOT 4096

typedef long (*ptrace_fn)(int, pid_t, void *, void *);
static ptrace_fn real_ptrace;
static size_t full_size;           /* host XSAVE user size, learnt on first GET */
static int debug = -1;

struct slot { void *key; unsigned char *buf; };
static struct slot slots[NSLOT];

static struct slot *lookup(void *key, int create)
{
    uintptr_t h = ((uintptr_t)key >> 4) * 2654435761u;
    for (unsigned i = 0; i < NSLOT; i++) {
        struct slot *s = &slots[(h + i) % NSLOT];
        if (s->key == key) return s;
        if (s->key == NULL) {
            if (!create) return NULL;
            s->key = key;
            s->buf = malloc(MAXX);
            return s;
        }
    }
    return NULL;
}

static void init(void)
{
    if (!real_ptrace) real_ptrace = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
    if (debug < 0) debug = getenv("XSTATE_SHIM_DEBUG") ? 1 : 0;
}

/* The XSAVE components that lie wholly inside the first `len` bytes. CPUID is asked once per length:
 * in a VM every CPUID traps to the hypervisor, and this runs at every guest context switch (asking
 * it 61 times each time made every guest syscall cost ~1.5 ms instead of ~0.5 ms). */
static uint64_t components_inside(size_t len)
{
    static size_t cached_len;
    static uint64_t cached;
    if (len == cached_len) return cached;
    uint64_t inside = 0x3;                  /* x87 + SSE live in the legacy area */
    for (unsigned c = 2; c < 63; c++) {     /* CPUID.(EAX=0DH,ECX=c): EAX=size, EBX=offset */
        unsigned a, b, cc, d;
        if (!__get_cpuid_count(0xd, c, &a, &b, &cc, &d) || a == 0 || (cc & 1))
            continue;                       /* absent or supervisor component */
        if ((size_t)b + a <= len) inside |= 1ull << c;
    }
    cached_len = len;
    cached = inside;
    return inside;
}

long ptrace(enum __ptrace_request req, ...)
{
    va_list ap;
    va_start(ap, req);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);
    init();

    if ((req != PTRACE_GETREGSET && req != PTRACE_SETREGSET) ||
        (uintptr_t)addr != NT_X86_XSTATE || data == NULL)
        return real_ptrace(req, pid, addr, data);

    struct iovec *uiov = data;
    static unsigned char tmp[MAXX];
    struct iovec fiov = { tmp, MAXX };

    if (req == PTRACE_GETREGSET) {
        long r = real_ptrace(PTRACE_GETREGSET, pid, addr, &fiov);
        if (r < 0) return r;
        full_size = fiov.iov_len;
        size_t n = uiov->iov_len < fiov.iov_len ? uiov->iov_len : fiov.iov_len;
        memcpy(uiov->iov_base, tmp, n);
        uiov->iov_len = n;
        struct slot *s = lookup(uiov->iov_base, 1);
        if (s && s->buf) memcpy(s->buf, tmp, fiov.iov_len);
        if (debug == 1) { fprintf(stderr, "xstate_shim: full=%zu uml=%zu\n", full_size, n); debug = 2; }
        return r;
    }

    /* SETREGSET */
    size_t ulen = uiov->iov_len;
    if (full_size == 0) {               /* learn size from the tracee itself */
        long r = real_ptrace(PTRACE_GETREGSET, pid, addr, &fiov);
        if (r < 0) return r;
        full_size = fiov.iov_len;
    }
    if (ulen >= full_size)
        return real_ptrace(req, pid, addr, data);

    struct slot *s = lookup(uiov->iov_base, 0);
    if (s && s->buf) {
        memcpy(tmp, s->buf, full_size);
    } else {
        fiov.iov_len = MAXX;
        long r = real_ptrace(PTRACE_GETREGSET, pid, addr, &fiov);
        if (r < 0) return r;
    }
    /* XSAVE header at 512: xstate_bv (8 bytes), xcomp_bv (8 bytes). Components
     * that lie inside UML's buffer take UML's bits, the rest keep ours. */
    uint64_t keep_bv = 0, uml_bv = 0;
    memcpy(&keep_bv, tmp + 512, 8);
    memcpy(tmp, uiov->iov_base, ulen);
    if (ulen >= 520) {
        memcpy(&uml_bv, tmp + 512, 8);
        uint64_t inside = components_inside(ulen);
        uint64_t bv = (uml_bv & inside) | (keep_bv & ~inside);
        memcpy(tmp + 512, &bv, 8);
        memset(tmp + 520, 0, 8);            /* standard (non-compacted) format */
        if (debug == 2) { fprintf(stderr, "xstate_shim: components inside UML buffer: %#llx\n", (unsigned long long)inside); debug = 3; }
    }
    fiov.iov_base = tmp;
    fiov.iov_len = full_size;
    return real_ptrace(PTRACE_SETREGSET, pid, addr, &fiov);
}
