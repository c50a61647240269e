/* server/job.c: see job.h. */
#include "server/job.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

struct job *job_new(void) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->status = 200;
    j->n_choices = 1;
    return j;
}

void job_release(struct job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    free(j->prompt);
    for (int i = 0; i < JOB_MAX_STOP; i++) free(j->stop[i]);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

int job_write(struct job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    int rc = OK;
    if (j->out_len + n > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap : 4096;
        while (cap < j->out_len + n) cap *= 2;
        char *b = realloc(j->out, cap);
        if (!b) {
            rc = ERR_NOMEM;
            goto out;
        }
        j->out = b;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    pthread_cond_broadcast(&j->cv);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void job_finish(struct job *j, int status) {
    pthread_mutex_lock(&j->mu);
    j->status = status;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}
