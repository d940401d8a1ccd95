/*
 * wrapper.h - the one header bindgen reads for crates/slurm-sys.
 *
 * The installed Slurm headers give job_desc_msg_t, SLURM_VERSION_NUMBER and the
 * ESLURM_* codes. Slurm's xmalloc/xstring/log helpers are not in any installed
 * header, but libslurm.so and libslurmfull.so (which slurmctld links) export them
 * with the prototypes below (Slurm src/common/xstring.h, xmalloc.h, log.h; one
 * argument for slurm_xfree checked with objdump on Debian's 22.05.8).
 */
#include <stddef.h>
#include <stdint.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/slurm_version.h>

/* xstrdup(): malloc'd copy with Slurm's xmalloc header; NULL in, NULL out. */
extern char *slurm_xstrdup(const char *str);
/* xfree(): frees *item (allocated by xmalloc) and sets *item = NULL. */
extern void slurm_xfree(void **item);
/* xsize(): the usable size of an xmalloc'd block. */
extern size_t slurm_xsize(void *item);

/* Slurm's logging; always call with "%s" and the message. */
extern void slurm_info(const char *fmt, ...);
extern void slurm_verbose(const char *fmt, ...);
extern void slurm_debug(const char *fmt, ...);
extern void slurm_error(const char *fmt, ...);
