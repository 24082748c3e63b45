/*
 * sysfs.c: the one piece of a goroce device's sysfs directory that
 * programs look at with plain file calls: /sys/class/infiniband/<dev>/
 * device/net/<ifname>, the network interface of the device's address
 * (rdma-core's tests find a device's IP address through it: `ls` the
 * directory, then `ip addr show <ifname>`).
 *
 * A goroce device has no kernel entry, so paths under a goroce device's
 * /sys/class/infiniband/<dev>/ are answered from a directory tree this
 * library builds, per user, in $XDG_RUNTIME_DIR or /tmp
 * (goroce-sysfs.<uid>/<dev>/device/net/<ifname>/), for stat, lstat,
 * statx, access and opendir (Python's os.path.exists and os.listdir, ls).
 * Everything else under /sys goes to the system; attribute files are
 * ibv_read_sysfs_file's (device.c).
 */
#include "shim.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYSFS_IB "/sys/class/infiniband/"

/* ifname_of finds the interface of a device's address: the one that has
 * it, else the one whose subnet holds it (127.0.0.2 is lo's). */
static int ifname_of(const struct gr_dev_info *d, char *name, size_t len)
{
	struct ifaddrs *ifa, *i;
	const uint8_t *g = d->gid;
	int v4 = memcmp(g, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0, pass, found = 0;

	if (getifaddrs(&ifa) != 0)
		return -1;
	for (pass = 0; pass < 2 && !found; pass++)
		for (i = ifa; i && !found; i = i->ifa_next) {
			if (!i->ifa_addr || !i->ifa_netmask)
				continue;
			if (v4 && i->ifa_addr->sa_family == AF_INET) {
				uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
				uint32_t m = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
				uint32_t x;

				memcpy(&x, g + 12, 4);
				found = pass == 0 ? a == x : (a & m) == (x & m);
			} else if (!v4 && i->ifa_addr->sa_family == AF_INET6) {
				const uint8_t *a = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr.s6_addr;
				const uint8_t *m = ((struct sockaddr_in6 *)i->ifa_netmask)->sin6_addr.s6_addr;
				int k;

				found = 1;
				for (k = 0; k < 16; k++)
					if (pass == 0 ? a[k] != g[k] : (a[k] & m[k]) != (g[k] & m[k]))
						found = 0;
			}
			if (found)
				snprintf(name, len, "%s", i->ifa_name);
		}
	freeifaddrs(ifa);
	return found ? 0 : -1;
}

static void mkdirs(char *path)
{
	char *p;

	for (p = path + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			mkdir(path, 0700);
			*p = '/';
		}
	mkdir(path, 0700);
}

static char sysfs_dir[PATH_MAX];

static void sysfs_build(void)
{
	const char *base = getenv("XDG_RUNTIME_DIR");
	struct ibv_device **list;
	struct stat st;
	char path[PATH_MAX], dir[PATH_MAX + 2 * IBV_SYSFS_NAME_MAX], ifname[IF_NAMESIZE];
	int i, n;

	if (!base || !*base)
		base = "/tmp";
	snprintf(path, sizeof(path), "%s/goroce-sysfs.%u", base, (unsigned int)getuid());
	mkdir(path, 0700);
	/* Ours alone: a directory another user made is not used. */
	if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
		return;
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++) {
		const struct gr_dev_info *d = gr_device_info(list[i]);

		if (!d || ifname_of(d, ifname, sizeof(ifname)))
			continue;
		snprintf(dir, sizeof(dir), "%s/%s/device/net/%s", path, list[i]->name, ifname);
		mkdirs(dir);
	}
	if (list)
		ibv_free_device_list(list);
	snprintf(sysfs_dir, sizeof(sysfs_dir), "%s", path);
}

/* sysfs_root builds the tree for every goroce device once per process and
 * returns its root ("" if it cannot be made). */
static const char *sysfs_root(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, sysfs_build);
	return sysfs_dir;
}

/* redirect returns the path to use for path: under the tree for a goroce
 * device's /sys/class/infiniband/<dev>/..., else path itself. */
static const char *redirect(const char *path, char *buf, size_t len)
{
	const char *rest, *root;

	if (!path || strncmp(path, SYSFS_IB "goroce", sizeof(SYSFS_IB) - 1 + 6) != 0)
		return path;
	rest = path + sizeof(SYSFS_IB) - 1;
	root = sysfs_root();
	if (!*root)
		return path;
	if ((size_t)snprintf(buf, len, "%s/%s", root, rest) >= len)
		return path;
	return buf;
}

/* Each call redirects its path, then calls libc's. */
#define PATH_CALL(sym, ver, ret, params, call)                             \
	GR_EXPORT ret gr_##sym params __asm__(#sym);                       \
	GR_EXPORT ret gr_##sym params                                      \
	{                                                                  \
		typedef ret(*fn_t) params;                                 \
		static fn_t real;                                          \
		char buf[PATH_MAX];                                        \
		if (!real)                                                 \
			real = (fn_t)dlvsym(RTLD_NEXT, #sym, ver);         \
		if (!real) /* an older glibc: its default version */       \
			real = (fn_t)dlsym(RTLD_NEXT, #sym);               \
		if (!real) {                                               \
			errno = ENOSYS;                                    \
			return -1;                                         \
		}                                                          \
		return real call;                                          \
	}

#define RP redirect(path, buf, sizeof(buf))
PATH_CALL(stat, "GLIBC_2.33", int, (const char *path, struct stat *st), (RP, st))
PATH_CALL(stat64, "GLIBC_2.33", int, (const char *path, struct stat64 *st), (RP, st))
PATH_CALL(lstat, "GLIBC_2.33", int, (const char *path, struct stat *st), (RP, st))
PATH_CALL(lstat64, "GLIBC_2.33", int, (const char *path, struct stat64 *st), (RP, st))
PATH_CALL(fstatat64, "GLIBC_2.33", int, (int dirfd, const char *path, struct stat64 *st, int flags),
	  (dirfd, RP, st, flags))
PATH_CALL(statx, "GLIBC_2.28", int,
	  (int dirfd, const char *path, int flags, unsigned int mask, struct statx *st),
	  (dirfd, RP, flags, mask, st))
PATH_CALL(access, "GLIBC_2.2.5", int, (const char *path, int mode), (RP, mode))

GR_EXPORT DIR *gr_opendir(const char *path) __asm__("opendir");
GR_EXPORT DIR *gr_opendir(const char *path)
{
	static DIR *(*real)(const char *);
	char buf[PATH_MAX];

	if (!real)
		real = (DIR * (*)(const char *)) dlvsym(RTLD_NEXT, "opendir", "GLIBC_2.2.5");
	if (!real)
		real = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
	if (!real) {
		errno = ENOSYS;
		return NULL;
	}
	return real(RP);
}
