/*
 * maps.c: the process's mappings, parsed from /proc/self/maps.
 */
#include "shim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* read_maps parses /proc/self/maps; returns the number of entries or -1. */
int gr_read_maps(struct gr_vma **out)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = gr_malloc(cap), *line, *save = NULL;
	struct gr_vma *v = NULL;
	int fd, n = 0, vcap = 0;
	ssize_t r;

	if (!buf)
		return -1;
	fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		gr_free(buf);
		return -1;
	}
	for (;;) {
		if (len + 4096 > cap) {
			char *nb = gr_realloc(buf, cap * 2);

			if (!nb)
				goto fail;
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + len, cap - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	fd = -1;
	buf[len] = 0;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long s, e, ino;
		unsigned int maj, min;
		unsigned long long off;
		char perms[8];
		int pathpos = 0;

		if (sscanf(line, "%lx-%lx %7s %llx %x:%x %lu %n", &s, &e, perms, &off, &maj, &min,
			   &ino, &pathpos) < 7)
			continue;
		if (n == vcap) {
			struct gr_vma *nv = gr_realloc(v, sizeof(*v) * (size_t)(vcap ? vcap * 2 : 256));

			if (!nv)
				goto fail;
			v = nv;
			vcap = vcap ? vcap * 2 : 256;
		}
		v[n].start = s;
		v[n].end = e;
		v[n].prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
			    (perms[2] == 'x' ? PROT_EXEC : 0);
		v[n].shared = perms[3] == 's';
		v[n].off = off;
		v[n].dev = makedev(maj, min);
		v[n].ino = ino;
		v[n].huge = pathpos && strstr(line + pathpos, "anon_hugepage") != NULL;
		n++;
	}
	gr_free(buf);
	*out = v;
	return n;
fail:
	if (fd >= 0)
		close(fd);
	gr_free(buf);
	gr_free(v);
	return -1;
}

struct gr_vma *gr_vma_at(struct gr_vma *v, int n, uintptr_t a)
{
	int i;

	for (i = 0; i < n; i++)
		if (v[i].start <= a && a < v[i].end)
			return &v[i];
	return NULL;
}
