/*
 * supervisor.h — private interfaces of the supervisor (src/supervisor/).
 */
#ifndef BF_SUPERVISOR_H
#define BF_SUPERVISOR_H

#include <stddef.h>
#include <stdint.h>

/* Reads the epoch under data_dir (LMDB), adds 1, writes it back.
 * 0 or -errno (message in err). Creates data_dir if needed. */
int bf_epoch_bump(const char *data_dir, int64_t *epoch, char *err, size_t errlen);
/* sd_notify(3) equivalent: 1 sent, 0 no NOTIFY_SOCKET, -1 error. */
int bf_sd_notify(const char *state);

#endif
