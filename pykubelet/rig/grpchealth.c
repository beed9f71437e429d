/*
 * grpc-health: a grpc.health.v1 Health server small enough to build offline, for the test images.
 *
 * It speaks just enough HTTP/2 cleartext (prior knowledge, as gRPC clients connect) for unary gRPC
 * calls: the connection preface, SETTINGS (+ACK), PING (+ACK), WINDOW_UPDATE (replenishing what the
 * client sends; the client's own windows are never approached by our few bytes), RST_STREAM, GOAWAY,
 * HEADERS/CONTINUATION and DATA. Request headers are not decoded (no HPACK decoder, so no Huffman or
 * dynamic table): every stream is answered as /grpc.health.v1.Health/Check, from its DATA (the 5-byte
 * gRPC prefix and a HealthCheckRequest, field 1 = service). Responses are encoded with the HPACK static
 * table and literals without indexing, so they never depend on the client's table settings.
 *
 *   grpc-health [-port 5000] [-bind ADDR] [-serving NAME]... [-not-serving NAME]...
 *               [-status-file PATH] [-delay-ms N] [-v]
 *
 * The whole server ("") is SERVING unless a flag names it. A name given with -serving answers SERVING,
 * with -not-serving NOT_SERVING; any other name gets gRPC status NOT_FOUND, "unknown service", as the
 * reference health servers answer. With -status-file, every SERVING answer becomes NOT_SERVING while
 * PATH does not exist, so a test flips health by creating or removing one file. -delay-ms holds each
 * answer back (to exceed a probe's timeout). One process per connection (fork), so a slow or hostile
 * client never holds up another; a malformed connection only ends itself with a GOAWAY.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { SERVING = 1, NOT_SERVING = 2 };
enum { GRPC_OK = 0, GRPC_NOT_FOUND = 5, GRPC_RESOURCE_EXHAUSTED = 8, GRPC_UNIMPLEMENTED = 12, GRPC_INTERNAL = 13 };

/* HTTP/2 (RFC 9113) frame types, flags and error codes used here. */
enum { F_DATA, F_HEADERS, F_PRIORITY, F_RST_STREAM, F_SETTINGS, F_PUSH_PROMISE, F_PING, F_GOAWAY,
       F_WINDOW_UPDATE, F_CONTINUATION };
#define FL_END_STREAM 0x1
#define FL_ACK 0x1
#define FL_END_HEADERS 0x4
#define FL_PADDED 0x8
#define FL_PRIORITY 0x20
enum { E_NO_ERROR = 0, E_PROTOCOL = 1, E_FRAME_SIZE = 6, E_REFUSED_STREAM = 7 };

#define MAX_FRAME 16384   /* SETTINGS_MAX_FRAME_SIZE we keep to (the default) */
#define MAX_STREAMS 100   /* SETTINGS_MAX_CONCURRENT_STREAMS we announce */
#define MAX_MESSAGE 4096  /* request bytes kept per stream; a HealthCheckRequest is a few bytes */
#define MAX_SERVICES 64

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static struct service {
    const char *name;
    int status;
} services[MAX_SERVICES + 1]; /* + the implicit "" */
static int nservices;
static const char *status_file;
static long delay_ms;
static int verbose;

struct stream {
    uint32_t id; /* 0: a free slot */
    size_t len;
    unsigned char buf[MAX_MESSAGE];
};

/* One connection per process: its state is global. */
static struct {
    int fd;
    unsigned char in[2 * (9 + MAX_FRAME)];
    size_t in_start, in_end;
    unsigned char out[16384];
    size_t out_len;
    uint32_t last_stream;
    uint32_t headers_stream; /* a HEADERS block awaiting CONTINUATION, or 0 */
    int headers_end_stream;
    struct stream streams[MAX_STREAMS];
} c;

/* -- I/O ------------------------------------------------------------------------------------------- */

static int flush_out(void)
{
    size_t done = 0;
    while (done < c.out_len) {
        ssize_t n = write(c.fd, c.out + done, c.out_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    c.out_len = 0;
    return 0;
}

/* Make at least n unread bytes available; answers queued so far go out before we block. */
static int need(size_t n)
{
    while (c.in_end - c.in_start < n) {
        if (c.out_len && flush_out() < 0)
            return -1;
        if (c.in_start + n > sizeof c.in) {
            memmove(c.in, c.in + c.in_start, c.in_end - c.in_start);
            c.in_end -= c.in_start;
            c.in_start = 0;
        }
        ssize_t r = read(c.fd, c.in + c.in_end, sizeof c.in - c.in_end);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c.in_end += (size_t)r;
    }
    return 0;
}

static void put_frame(int type, int flags, uint32_t stream, const void *payload, size_t len)
{
    if (c.out_len + 9 + len > sizeof c.out)
        flush_out(); /* a failed write shows up as EOF on the next read */
    unsigned char *h = c.out + c.out_len;
    h[0] = (unsigned char)(len >> 16);
    h[1] = (unsigned char)(len >> 8);
    h[2] = (unsigned char)len;
    h[3] = (unsigned char)type;
    h[4] = (unsigned char)flags;
    h[5] = (unsigned char)((stream >> 24) & 0x7f);
    h[6] = (unsigned char)(stream >> 16);
    h[7] = (unsigned char)(stream >> 8);
    h[8] = (unsigned char)stream;
    if (len)
        memcpy(h + 9, payload, len);
    c.out_len += 9 + len;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_window_update(uint32_t stream, uint32_t increment)
{
    unsigned char p[4];
    put_u32(p, increment & 0x7fffffff);
    put_frame(F_WINDOW_UPDATE, 0, stream, p, 4);
}

static void put_rst_stream(uint32_t stream, uint32_t code)
{
    unsigned char p[4];
    put_u32(p, code);
    put_frame(F_RST_STREAM, 0, stream, p, 4);
}

/* A connection error: GOAWAY with the code, then the caller closes. */
static int goaway(uint32_t code)
{
    unsigned char p[8];
    put_u32(p, c.last_stream);
    put_u32(p + 4, code);
    put_frame(F_GOAWAY, 0, 0, p, 8);
    flush_out();
    return -1;
}

/* -- HPACK (encoding only: static table indexes and literals without indexing, no Huffman) ---------- */

static size_t hpack_literal(unsigned char *p, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value); /* both short constants: 7-bit lengths */
    size_t n = 0;
    p[n++] = 0x00;
    p[n++] = (unsigned char)nl;
    memcpy(p + n, name, nl);
    n += nl;
    p[n++] = (unsigned char)vl;
    memcpy(p + n, value, vl);
    return n + vl;
}

static size_t hpack_response_start(unsigned char *p)
{
    static const char ct[] = "application/grpc";
    size_t n = 0;
    p[n++] = 0x88;        /* :status: 200, static index 8 */
    p[n++] = 0x0f;        /* literal without indexing, name = static index 31 (content-type): */
    p[n++] = 31 - 15;     /*   4-bit prefix full, then the rest */
    p[n++] = sizeof ct - 1;
    memcpy(p + n, ct, sizeof ct - 1);
    return n + sizeof ct - 1;
}

static size_t hpack_status(unsigned char *p, int code, const char *message)
{
    char digits[8];
    snprintf(digits, sizeof digits, "%d", code);
    size_t n = hpack_literal(p, "grpc-status", digits);
    if (message)
        n += hpack_literal(p + n, "grpc-message", message);
    return n;
}

/* -- the health service ---------------------------------------------------------------------------- */

static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return -1;
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* HealthCheckRequest: field 1 (string service); other fields are skipped as protobuf allows. */
static int parse_request(const unsigned char *p, size_t len, const unsigned char **name, size_t *name_len)
{
    const unsigned char *end = p + len;
    *name = (const unsigned char *)"";
    *name_len = 0;
    while (p < end) {
        uint64_t tag, v;
        if (read_varint(&p, end, &tag) < 0)
            return -1;
        switch (tag & 7) {
        case 0:
            if (read_varint(&p, end, &v) < 0)
                return -1;
            break;
        case 1:
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 2:
            if (read_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p))
                return -1;
            if (tag >> 3 == 1) {
                *name = p;
                *name_len = (size_t)v;
            }
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        default:
            return -1;
        }
        if (tag >> 3 == 1 && (tag & 7) != 2)
            return -1;
    }
    return 0;
}

static int lookup(const unsigned char *name, size_t len)
{
    for (int i = nservices - 1; i >= 0; i--) /* the last flag for a name wins */
        if (strlen(services[i].name) == len && memcmp(services[i].name, name, len) == 0)
            return services[i].status;
    return 0;
}

static const char *status_word(int status)
{
    return status == SERVING ? "SERVING" : status == NOT_SERVING ? "NOT_SERVING" : "UNKNOWN";
}

/* Trailers-only answer: one HEADERS frame with the status, ending the stream. */
static void answer_error(uint32_t stream, int code, const char *message)
{
    unsigned char block[256];
    size_t n = hpack_response_start(block);
    n += hpack_status(block + n, code, message);
    put_frame(F_HEADERS, FL_END_HEADERS | FL_END_STREAM, stream, block, n);
}

static void answer(struct stream *s)
{
    const unsigned char *msg = s->buf, *name;
    size_t name_len;
    uint32_t id = s->id;
    s->id = 0;
    if (delay_ms > 0) {
        struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
        flush_out();
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    if (s->len < 5 || ((uint32_t)msg[1] << 24 | (uint32_t)msg[2] << 16 | (uint32_t)msg[3] << 8 | msg[4]) != s->len - 5) {
        answer_error(id, GRPC_INTERNAL, "grpc-health: expected one request message");
        return;
    }
    if (msg[0] != 0) {
        answer_error(id, GRPC_UNIMPLEMENTED, "grpc-health: compressed messages are not supported");
        return;
    }
    if (parse_request(msg + 5, s->len - 5, &name, &name_len) < 0) {
        answer_error(id, GRPC_INTERNAL, "grpc-health: malformed HealthCheckRequest");
        return;
    }
    int status = lookup(name, name_len);
    if (status == SERVING && status_file && access(status_file, F_OK) != 0)
        status = NOT_SERVING;
    if (verbose)
        printf("check service=\"%.*s\" status=%s\n", (int)name_len, name, status ? status_word(status) : "unknown service");
    if (!status) {
        answer_error(id, GRPC_NOT_FOUND, "unknown service");
        return;
    }
    unsigned char block[128];
    size_t n = hpack_response_start(block);
    put_frame(F_HEADERS, FL_END_HEADERS, id, block, n);
    /* HealthCheckResponse{status}: the gRPC prefix (uncompressed, length 2), then field 1 as a varint. */
    unsigned char data[7] = {0, 0, 0, 0, 2, 0x08, (unsigned char)status};
    put_frame(F_DATA, 0, id, data, sizeof data);
    n = hpack_status(block, GRPC_OK, NULL);
    put_frame(F_HEADERS, FL_END_HEADERS | FL_END_STREAM, id, block, n);
}

/* -- HTTP/2 ---------------------------------------------------------------------------------------- */

static struct stream *find_stream(uint32_t id)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c.streams[i].id == id)
            return &c.streams[i];
    return NULL;
}

/* The request headers are complete (HEADERS or its last CONTINUATION). */
static void headers_done(uint32_t id, int end_stream)
{
    struct stream *s = find_stream(id);
    if (!s) {
        if (id <= c.last_stream && id != 0)
            return; /* trailers for a stream we already answered */
        c.last_stream = id;
        s = find_stream(0);
        if (!s) {
            put_rst_stream(id, E_REFUSED_STREAM);
            return;
        }
        s->id = id;
        s->len = 0;
    }
    if (end_stream)
        answer(s);
}

static void on_data(uint32_t id, int flags, const unsigned char *p, size_t len)
{
    struct stream *s = find_stream(id);
    if (!s)
        return; /* answered or reset already: the bytes are dropped */
    if (s->len + len > MAX_MESSAGE) {
        answer_error(id, GRPC_RESOURCE_EXHAUSTED, "grpc-health: request too large");
        put_rst_stream(id, E_NO_ERROR);
        s->id = 0;
        return;
    }
    memcpy(s->buf + s->len, p, len);
    s->len += len;
    if (flags & FL_END_STREAM)
        answer(s);
}

/* Strip the padding of a DATA or HEADERS frame; -1 when it does not fit. */
static int unpad(int flags, const unsigned char **p, size_t *len)
{
    if (!(flags & FL_PADDED))
        return 0;
    if (*len < 1 || (*p)[0] >= *len)
        return -1;
    size_t pad = (*p)[0];
    *p += 1;
    *len -= 1 + pad;
    return 0;
}

static int serve(void)
{
    static const unsigned char settings[] = {0, 3, 0, 0, 0, MAX_STREAMS}; /* MAX_CONCURRENT_STREAMS */
    put_frame(F_SETTINGS, 0, 0, settings, sizeof settings);
    if (flush_out() < 0 || need(sizeof PREFACE - 1) < 0)
        return -1;
    if (memcmp(c.in + c.in_start, PREFACE, sizeof PREFACE - 1) != 0)
        return goaway(E_PROTOCOL);
    c.in_start += sizeof PREFACE - 1;
    for (;;) {
        if (need(9) < 0)
            return 0;
        const unsigned char *h = c.in + c.in_start;
        size_t len = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
        int type = h[3], flags = h[4];
        uint32_t id = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffff;
        if (len > MAX_FRAME)
            return goaway(E_FRAME_SIZE);
        if (need(9 + len) < 0) /* may move the buffer: h is stale from here on */
            return 0;
        size_t frame_len = len;
        const unsigned char *p = c.in + c.in_start + 9;
        c.in_start += 9 + len; /* p stays valid until the next need() */
        if (c.headers_stream && (type != F_CONTINUATION || id != c.headers_stream))
            return goaway(E_PROTOCOL);
        switch (type) {
        case F_DATA:
            if (id == 0 || unpad(flags, &p, &len) < 0)
                return goaway(E_PROTOCOL);
            if (frame_len) /* the connection window: what the client sent, padding included */
                put_window_update(0, (uint32_t)frame_len);
            on_data(id, flags, p, len);
            break;
        case F_HEADERS:
            if (id == 0 || !(id & 1) || unpad(flags, &p, &len) < 0 || ((flags & FL_PRIORITY) && len < 5))
                return goaway(E_PROTOCOL);
            if (flags & FL_END_HEADERS) {
                headers_done(id, flags & FL_END_STREAM);
            } else {
                c.headers_stream = id;
                c.headers_end_stream = flags & FL_END_STREAM;
            }
            break;
        case F_CONTINUATION:
            if (!c.headers_stream)
                return goaway(E_PROTOCOL);
            if (flags & FL_END_HEADERS) {
                c.headers_stream = 0;
                headers_done(id, c.headers_end_stream);
            }
            break;
        case F_SETTINGS:
            if (id != 0)
                return goaway(E_PROTOCOL);
            if (flags & FL_ACK) {
                if (len)
                    return goaway(E_FRAME_SIZE);
            } else {
                if (len % 6)
                    return goaway(E_FRAME_SIZE);
                put_frame(F_SETTINGS, FL_ACK, 0, NULL, 0);
            }
            break;
        case F_PING:
            if (id != 0 || len != 8)
                return goaway(len != 8 ? E_FRAME_SIZE : E_PROTOCOL);
            if (!(flags & FL_ACK))
                put_frame(F_PING, FL_ACK, 0, p, 8);
            break;
        case F_RST_STREAM: {
            struct stream *s = id ? find_stream(id) : NULL;
            if (s)
                s->id = 0;
            break;
        }
        case F_GOAWAY:
            flush_out();
            return 0;
        case F_PUSH_PROMISE:
            return goaway(E_PROTOCOL);
        default: /* WINDOW_UPDATE, PRIORITY and unknown types: nothing to do */
            break;
        }
    }
}

/* -- process --------------------------------------------------------------------------------------- */

static void usage(const char *argv0, int code)
{
    fprintf(code ? stderr : stdout,
            "usage: %s [-port N] [-bind ADDR] [-serving NAME]... [-not-serving NAME]...\n"
            "          [-status-file PATH] [-delay-ms N] [-v]\n"
            "A grpc.health.v1 Health/Check server over HTTP/2 cleartext. \"\" is SERVING unless named;\n"
            "other names answer NOT_FOUND unless given; without PATH, SERVING reads NOT_SERVING.\n",
            argv0);
    exit(code);
}

static void add_service(const char *name, int status)
{
    if (nservices == MAX_SERVICES) {
        fprintf(stderr, "grpc-health: more than %d services\n", MAX_SERVICES);
        exit(2);
    }
    services[nservices].name = name;
    services[nservices++].status = status;
}

static void on_term(int sig)
{
    (void)sig;
    _exit(0); /* as PID 1 in a container, SIGTERM would otherwise be ignored */
}

static int listen_on(const char *bind_addr, int port)
{
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    int family = AF_INET6;
    if (bind_addr) {
        if (inet_pton(AF_INET, bind_addr, &a4.sin_addr) == 1)
            family = AF_INET;
        else if (inet_pton(AF_INET6, bind_addr, &a6.sin6_addr) != 1) {
            fprintf(stderr, "grpc-health: -bind %s: not an IP address\n", bind_addr);
            exit(2);
        }
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && family == AF_INET6 && !bind_addr) { /* a kernel or namespace without IPv6 */
        family = AF_INET;
        fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) {
        perror("grpc-health: socket");
        exit(1);
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6 && !bind_addr)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    int rc = family == AF_INET6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6) : bind(fd, (struct sockaddr *)&a4, sizeof a4);
    if (rc < 0 || listen(fd, 512) < 0) {
        fprintf(stderr, "grpc-health: listening on port %d: %s\n", port, strerror(errno));
        exit(1);
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *bind_addr = NULL;
    int port = 5000, named_root = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = NULL;
        if (flag[0] != '-')
            usage(argv[0], 2);
        flag += flag[1] == '-' ? 2 : 1; /* -flag and --flag alike */
        char *eq = strchr(flag, '=');
        if (eq) {
            *eq = '\0';
            value = eq + 1;
        }
        if (!strcmp(flag, "h") || !strcmp(flag, "help"))
            usage(argv[0], 0);
        if (!strcmp(flag, "v")) {
            verbose = 1;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc)
                usage(argv[0], 2);
            value = argv[++i];
        }
        if (!strcmp(flag, "port"))
            port = atoi(value);
        else if (!strcmp(flag, "bind"))
            bind_addr = value;
        else if (!strcmp(flag, "serving") || !strcmp(flag, "not-serving")) {
            add_service(value, flag[0] == 's' ? SERVING : NOT_SERVING);
            named_root |= value[0] == '\0';
        } else if (!strcmp(flag, "status-file"))
            status_file = value;
        else if (!strcmp(flag, "delay-ms"))
            delay_ms = atol(value);
        else
            usage(argv[0], 2);
    }
    if (port <= 0 || port > 65535)
        usage(argv[0], 2);
    if (!named_root) { /* before the flags, so nothing overrides a flag */
        memmove(services + 1, services, sizeof services[0] * (size_t)nservices);
        services[0].name = "";
        services[0].status = SERVING;
        nservices++;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGCHLD, SIG_IGN); /* children are reaped by the kernel */
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int lfd = listen_on(bind_addr, port);
    printf("grpc-health: serving grpc.health.v1 on port %d\n", port);
    fflush(stdout);
    if (verbose)
        setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) { /* EINTR, ECONNABORTED, EMFILE: try again, without spinning */
            if (errno != EINTR)
                usleep(10000);
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* connections end with the server */
            close(lfd);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            c.fd = fd;
            serve();
            _exit(0);
        }
        close(fd);
    }
}
