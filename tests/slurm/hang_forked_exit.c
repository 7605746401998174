/* A fault for tests/slurm/test_slurmd_stop.py, preloaded into slurmd (LD_PRELOAD): a process
 * forked from slurmd that exits without executing a program hangs on its way out, as the
 * fork child of a slurmd reconfigure was seen to (CI, Slurm 24.11.5). The old slurmd then
 * waits for it and never tells systemd the new slurmd's pid. */
#include <stdlib.h>
#include <unistd.h>

static pid_t loaded_in;

static void hang_if_forked(void)
{
	if (getpid() != loaded_in)
		for (;;)
			pause();
}

__attribute__((constructor)) static void arm(void)
{
	loaded_in = getpid();
	atexit(hang_if_forked);
}
