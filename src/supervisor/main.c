/*
 * main.c — bigfleet-shardd: parse the flags and run the process's role.
 *
 * Started without --role it is the supervisor; the supervisor re-executes
 * this binary with --role=<session|reconciler|cycle|executor> for each child.
 */
#include <stdio.h>
#include <string.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/process.h"

int main(int argc, char **argv)
{
    static struct bf_config cfg;
    char err[512] = "";
    int rc = bf_config_parse(&cfg, argc, argv, stdout, err, sizeof err);
    if (rc == BF_CONFIG_EXIT_OK)
        return 0;
    if (rc == BF_CONFIG_USAGE) {
        fprintf(stderr, "bigfleet-shardd: %s\nTry 'bigfleet-shardd --help' for more information.\n",
                err);
        return 2;
    }
    if (strcmp(cfg.role, "session") == 0)
        return bf_session_main(&cfg);
    if (strcmp(cfg.role, "reconciler") == 0)
        return bf_reconciler_main(&cfg);
    if (strcmp(cfg.role, "cycle") == 0)
        return bf_cycle_main(&cfg);
    if (strcmp(cfg.role, "executor") == 0)
        return bf_executor_main(&cfg);
    return bf_supervisor_main(&cfg, argc, argv);
}
