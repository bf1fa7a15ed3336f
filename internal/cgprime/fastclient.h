// The fast client of the sbx service (fastclient.c).
#ifndef SBX_FASTCLIENT_H
#define SBX_FASTCLIENT_H

// SBX_EXIT_SETUP is sbx exec's status when sbx itself failed (runner.ExitSetup; a test holds them
// equal).
#define SBX_EXIT_SETUP 125

// sbx_fast_socket says whether path is a socket of the caller's service to use.
int sbx_fast_socket(const char *path);

// sbx_fast_exec hands the run of sbx exec (argv) to the service at socket_path and exits with its
// status; it returns when the service did not take the run. caller_slack is the timer slack sbx was
// started with, closed the mask of stdio that were closed.
void sbx_fast_exec(int argc, char **argv, const char *socket_path, unsigned long caller_slack, int closed);

#endif
