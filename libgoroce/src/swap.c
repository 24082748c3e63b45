/*
 * swap.c: replacing the pages of a live range with a copy of them, without
 * losing a write another thread makes meanwhile.
 *
 * mem.c shares private pages with the daemon by copying them into a memfd
 * mapped over the same addresses (and back, at the last deregistration).
 * A write another thread makes to those pages after the copy and before the
 * new mapping replaces the old would be lost, and the pages hold whatever
 * else the heap put there (the program's own state, libc's). So the range is
 * made read-only first: a thread that writes it meanwhile faults, and this
 * file's SIGSEGV handler makes it wait until the new mapping is in place,
 * then lets it retry the write there.
 *
 * Why a handler and not userfaultfd: write-protecting with userfaultfd needs
 * privileges (vm.unprivileged_userfaultfd is 0 by default, and container
 * seccomp profiles refuse the system call) or UFFD_USER_MODE_ONLY, which
 * fails writes by the kernel (EFAULT) exactly as a read-only page does, and
 * it covers anonymous, shmem and hugetlb memory only. mprotect works on
 * every private mapping, everywhere.
 *
 * The handler:
 *  - is (re)installed before each swap if the program replaced it, and
 *    passes every fault that is not the swap's to the handler it replaced
 *    (SIG_DFL: the default action, as if it were not there);
 *  - runs on the thread's alternate stack if it has one (SA_ONSTACK), so a
 *    program's stack-overflow handler still works;
 *  - only reads atomics, waits with FUTEX_WAIT and saves errno: it is
 *    async-signal-safe.
 *
 * What remains (README, "Semantic differences"): a system call of another
 * thread that writes into those pages during the swap (a read(2) into a
 * buffer there) fails with EFAULT instead of losing its data silently; a
 * thread that writes them with SIGSEGV blocked (a handler whose sa_mask
 * holds it, pthread_sigmask) is killed by the kernel, and so is one whose
 * stack is itself in the range (another thread's stack registered); the
 * swap lasts microseconds.
 */
#include "shim.h"

#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Recent swaps' ranges: a fault on one of them is retried even if its
 * handler runs after the swap ended (the thread was preempted between the
 * fault and the signal's delivery). */
#define GR_WINDOWS 64
static struct {
	uintptr_t start, end;
} windows[GR_WINDOWS];

/* swap_seq is odd while a swap is under way: the futex faulting threads
 * wait on. Swaps are serialised by mem.c's lock. */
static unsigned swap_seq;

/* The handler ours replaced; two slots so that the handler never reads one
 * being rewritten. */
static struct sigaction chained[2];
static int chained_idx;

/* The last fault this thread retried and the swap count then: the same
 * fault again with no swap since is not the swap's. */
static __thread uintptr_t retried_addr __attribute__((tls_model("initial-exec")));
static __thread unsigned retried_seq __attribute__((tls_model("initial-exec")));
static __thread int retried __attribute__((tls_model("initial-exec")));

static int in_window(uintptr_t a)
{
	int i;

	for (i = 0; i < GR_WINDOWS; i++)
		if (__atomic_load_n(&windows[i].start, __ATOMIC_RELAXED) <= a &&
		    a < __atomic_load_n(&windows[i].end, __ATOMIC_RELAXED))
			return 1;
	return 0;
}

/* chain hands the signal to the handler ours replaced. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *o = &chained[__atomic_load_n(&chained_idx, __ATOMIC_ACQUIRE)];
	struct sigaction dfl;

	if (o->sa_flags & SA_SIGINFO) {
		o->sa_sigaction(sig, si, uc);
		return;
	}
	if (o->sa_handler != SIG_DFL && o->sa_handler != SIG_IGN) {
		o->sa_handler(sig);
		return;
	}
	if (o->sa_handler == SIG_IGN && si->si_code <= 0)
		return; /* sent, and ignored */
	/* The default action: a fault kills when the instruction runs again
	 * (the kernel ignores SIG_IGN for faults too); a sent signal is sent
	 * again, pending until this handler returns. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	if (si->si_code <= 0)
		syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig);
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, ours = 0;
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned s;

	if (si->si_code > 0) { /* a fault, not a signal sent by a process */
		s = __atomic_load_n(&swap_seq, __ATOMIC_ACQUIRE);
		if (s & 1) {
			/* A swap is under way: whatever this fault is, it
			 * may be the swap's; wait and retry. */
			while (__atomic_load_n(&swap_seq, __ATOMIC_ACQUIRE) == s)
				syscall(SYS_futex, &swap_seq, FUTEX_WAIT_PRIVATE, s, NULL, NULL, 0);
			ours = 1;
		} else {
			ours = in_window(a);
		}
		s = __atomic_load_n(&swap_seq, __ATOMIC_ACQUIRE);
		if (ours && retried && retried_addr == a && retried_seq == s)
			ours = 0; /* retried once already, and no swap since */
		if (ours) {
			retried = 1;
			retried_addr = a;
			retried_seq = s;
		}
	}
	errno = saved;
	if (!ours)
		chain(sig, si, uc);
}

/* ensure_handler installs on_segv unless it is there, keeping the handler
 * it replaces. */
static void ensure_handler(void)
{
	struct sigaction cur, sa;
	int next;

	if (sigaction(SIGSEGV, NULL, &cur) < 0)
		return;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv)
		return;
	next = !__atomic_load_n(&chained_idx, __ATOMIC_RELAXED);
	chained[next] = cur;
	__atomic_store_n(&chained_idx, next, __ATOMIC_RELEASE);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
}

void gr_swap_begin(struct gr_swap *w, uintptr_t start, uintptr_t end)
{
	unsigned s = __atomic_load_n(&swap_seq, __ATOMIC_RELAXED);
	sigset_t all;
	int i = (int)((s >> 1) % GR_WINDOWS);

	ensure_handler();
	/* No handler frame may land on the caller's stack meanwhile: it may
	 * be in the range. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &w->old);
	__atomic_store_n(&windows[i].start, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&windows[i].end, end, __ATOMIC_RELAXED);
	__atomic_store_n(&windows[i].start, start, __ATOMIC_RELAXED);
	__atomic_store_n(&swap_seq, s + 1, __ATOMIC_SEQ_CST);
}

void gr_swap_end(struct gr_swap *w)
{
	__atomic_add_fetch(&swap_seq, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &swap_seq, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
	pthread_sigmask(SIG_SETMASK, &w->old, NULL);
}

/*
 * gr_swap_move makes [dst, dst+len) read-only, copies len bytes from src
 * into tmp and moves tmp over dst (the new pages have tmp's protections).
 * On failure dst is the old pages, readable and writable throughout.
 *
 * Between the first step and the last the calling thread must not write
 * dst: it may be the page its own stack is on. On x86-64 the three steps
 * are one assembly block that writes no stack. Elsewhere, a caller whose
 * stack is in the range skips the write protection (its registration can
 * lose another thread's write, as before).
 */
int gr_swap_move(void *tmp, const void *src, void *dst, size_t len)
{
	long ret;

#if defined(__x86_64__)
	register void *r8 __asm__("r8") = dst;
	register void *r9 __asm__("r9") = tmp;
	register const void *r12 __asm__("r12") = src;
	register size_t r13 __asm__("r13") = len;

	__asm__ volatile("mov %[mprotect], %%eax\n\t"
			 "mov %%r8, %%rdi\n\t"
			 "mov %%r13, %%rsi\n\t"
			 "mov %[ro], %%edx\n\t"
			 "syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 2f\n\t"
			 "mov %%r9, %%rdi\n\t"
			 "mov %%r12, %%rsi\n\t"
			 "mov %%r13, %%rcx\n\t"
			 "rep movsb\n\t"
			 "mov %[mremap], %%eax\n\t"
			 "mov %%r9, %%rdi\n\t"
			 "mov %%r13, %%rsi\n\t"
			 "mov %%r13, %%rdx\n\t"
			 "mov %[flags], %%r10d\n\t"
			 "syscall\n\t"
			 "cmp $-4095, %%rax\n\t"
			 "jb 1f\n"
			 /* Failed: dst is still the old pages, maybe
			  * read-only (mprotect may fail half way). */
			 "2:\n\t"
			 "mov %%rax, %%r9\n\t"
			 "mov %[mprotect], %%eax\n\t"
			 "mov %%r8, %%rdi\n\t"
			 "mov %%r13, %%rsi\n\t"
			 "mov %[rw], %%edx\n\t"
			 "syscall\n\t"
			 "mov %%r9, %%rax\n"
			 "1:"
			 : "=&a"(ret), "+r"(r9)
			 : "r"(r8), "r"(r12), "r"(r13), [mprotect] "i"(SYS_mprotect),
			   [mremap] "i"(SYS_mremap), [ro] "i"(PROT_READ),
			   [rw] "i"(PROT_READ | PROT_WRITE),
			   [flags] "i"(MREMAP_MAYMOVE | MREMAP_FIXED)
			 : "rdi", "rsi", "rdx", "rcx", "r10", "r11", "memory", "cc");
#else
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	int protect = sp + 65536 < (uintptr_t)dst || sp > (uintptr_t)dst + len + 65536;

	if (protect && mprotect(dst, len, PROT_READ) < 0) {
		ret = -errno;
		mprotect(dst, len, PROT_READ | PROT_WRITE);
		errno = (int)-ret;
		return -1;
	}
	memcpy(tmp, src, len);
	ret = (long)mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	if (ret == (long)MAP_FAILED) {
		ret = -errno;
		if (protect)
			mprotect(dst, len, PROT_READ | PROT_WRITE);
	}
#endif
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return 0;
}
