/* server/http.c: the HTTP side on libmicrohttpd, one thread per connection. The request path:
 * read the body (capped) -> route -> authenticate -> parse into a job -> queue it -> wait for
 * the engine's bytes (whole body, or SSE events pulled by the response callback) -> respond.
 * While waiting, the client's socket is watched: a client that hangs up cancels its job, and
 * the engine stops it at the next token. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <time.h>

struct conn {
    char *body;
    size_t len, cap;
    int too_big;
};

struct stream {
    struct server *s;
    struct job *j;
    int fd;
};

static void add_common_headers(struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
}

static enum MHD_Result respond(struct MHD_Connection *c, int status, const char *type,
                               const char *body) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    add_common_headers(r, type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static void count(struct server *s, int ok) {
    pthread_mutex_lock(&s->mu);
    if (ok)
        s->m.requests_ok++;
    else
        s->m.requests_err++;
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result respond_error(struct server *s, struct MHD_Connection *c, int status,
                                     const char *msg) {
    const char *type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    const char *code = status == 401   ? "invalid_api_key"
                       : status == 404 ? "not_found"
                       : status == 413 ? "request_too_large"
                       : status == 503 ? "overloaded"
                                       : NULL;
    char *body = oa_error_body(msg, type, code);
    count(s, 0);
    const char *b = body ? body : "{}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    add_common_headers(r, "application/json");
    if (status == 503 || status == 429) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Constant-time comparison of the Authorization header with "Bearer <key>". */
static int authorized(const struct server *s, struct MHD_Connection *c) {
    if (!s->opts.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *got = h + 7, *want = s->opts.api_key;
    size_t n = strlen(want), m = strlen(got);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

/* 1 when the peer closed its side of the connection. */
static int hung_up(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Waits until the job has unsent bytes or is done, watching the client. Locks j->mu. */
static void wait_output(struct job *j, int fd) {
    while (j->out_pos == j->out_len && !j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (hung_up(fd)) atomic_store(&j->cancelled, 1);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *st = cls;
    struct job *j = st->j;
    pthread_mutex_lock(&j->mu);
    wait_output(j, st->fd);
    size_t n = j->out_len - j->out_pos;
    if (n > max) n = max;
    memcpy(buf, j->out + j->out_pos, n);
    j->out_pos += n;
    int end = !n && j->done;
    pthread_mutex_unlock(&j->mu);
    return end ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_free(void *cls) {
    struct stream *st = cls;
    atomic_store(&st->j->cancelled, 1); /* no-op when finished; stops it when the client left */
    job_release(st->j);
    free(st);
}

static void make_id(struct job *j) {
    unsigned char r[12] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)rand();
    int n = snprintf(j->id, sizeof j->id, "%s", j->chat ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof r; i++)
        n += snprintf(j->id + n, sizeof j->id - (size_t)n, "%02x", r[i]);
    j->created = (long)time(NULL);
}

static enum MHD_Result completion(struct server *s, struct MHD_Connection *c, struct conn *cn,
                                  int chat) {
    struct job *j = job_new();
    if (!j) return respond_error(s, c, 500, "out of memory");
    int status = 400;
    char err[512];
    if (oa_parse_request(s, cn->body ? cn->body : "", cn->len, chat, j, &status, err, sizeof err)) {
        job_release(j);
        return respond_error(s, c, status, err);
    }
    make_id(j);
    if (queue_push(s, j)) {
        job_release(j);
        return respond_error(s, c, 503, "the server is busy: too many queued requests");
    }
    int fd = conn_fd(c);
    if (j->stream) {
        struct stream *st = malloc(sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(
                                          MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free)
                                    : NULL;
        if (!r) {
            free(st);
            atomic_store(&j->cancelled, 1);
            job_release(j);
            return respond_error(s, c, 500, "out of memory");
        }
        *st = (struct stream){s, j, fd};
        add_common_headers(r, "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        count(s, 1);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) wait_output(j, fd), j->out_pos = j->out_len;
    int code = j->status;
    char *body = j->out ? strndup(j->out, j->out_len) : strdup("{}");
    pthread_mutex_unlock(&j->mu);
    job_release(j);
    count(s, code == 200);
    enum MHD_Result ret =
        respond(c, code == 499 ? 400 : code, "application/json", body ? body : "{}");
    free(body);
    return ret;
}

static enum MHD_Result get_route(struct server *s, struct MHD_Connection *c, const char *url) {
    if (!strcmp(url, "/health")) {
        char b[256];
        snprintf(b, sizeof b, "{\"status\":\"ok\",\"model\":\"%s\",\"mode\":\"%s\"}", s->model_name,
                 gen_mode_name(s->opts.mode));
        return respond(c, 200, "application/json", b);
    }
    if (!strcmp(url, "/metrics")) {
        char *m = metrics_render(s);
        enum MHD_Result r = respond(c, 200, "text/plain; version=0.0.4", m ? m : "");
        free(m);
        return r;
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", s->model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "dspark");
        cJSON_AddNumberToObject(m, "context_length", s->cfg->max_pos);
        cJSON_AddItemToArray(data, m);
        char *t = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        enum MHD_Result r = respond(c, 200, "application/json", t ? t : "{}");
        free(t);
        return r;
    }
    return respond_error(s, c, 404, "no such route");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    struct server *s = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) { /* more body */
        if (!cn->too_big && cn->len + *upload_size > s->opts.max_body_bytes) cn->too_big = 1;
        if (!cn->too_big) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = cn->cap ? cn->cap : 16384;
                while (cap < cn->len + *upload_size + 1) cap *= 2;
                char *b = realloc(cn->body, cap);
                if (!b) return MHD_NO;
                cn->body = b;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "OPTIONS")) return respond(c, 204, "text/plain", "");
    int is_chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions");
    int is_cmpl = !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
    if (strcmp(url, "/health") && !authorized(s, c))
        return respond_error(s, c, 401, "missing or wrong API key (Authorization: Bearer KEY)");
    if (!strcmp(method, "GET")) return get_route(s, c, url);
    if (strcmp(method, "POST")) return respond_error(s, c, 405, "method not allowed");
    if (!is_chat && !is_cmpl) return respond_error(s, c, 404, "no such route");
    if (cn->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body is larger than %zu bytes", s->opts.max_body_bytes);
        return respond_error(s, c, 413, m);
    }
    return completion(s, c, cn, is_chat);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    struct conn *cn = *con_cls;
    if (cn) free(cn->body);
    free(cn);
    *con_cls = NULL;
}

int http_start(struct server *s) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->opts.port)};
    if (inet_pton(AF_INET, s->opts.host, &addr.sin_addr) != 1) {
        log_error("--host %s is not an IPv4 address", s->opts.host);
        return ERR_ARG;
    }
    s->http = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
        MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
    if (!s->http) {
        log_error("cannot listen on %s:%d", s->opts.host, s->opts.port);
        log_hint("is another server using the port? pick another with --port");
        return ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->http, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->opts.port;
    return OK;
}

void http_stop(struct server *s) {
    if (s->http) MHD_stop_daemon(s->http);
    s->http = NULL;
}
