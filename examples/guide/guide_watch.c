/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 4 (docs/guide.md): a subscription to region changes. It
 * connects with an event callback, prints "watching NAME (N bytes,
 * generation G)", and waits for the server to replace or remove the region
 * (kill -USR1 the guide_server of step 1), then reads the new version.
 *
 *   guide_watch HOST:PORT [NAME]     default NAME greeting
 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "guide.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  changed = PTHREAD_COND_INITIALIZER;
static remora_event_t  last; /* the event (its name is not kept) */
static int             have_event;

/* Runs on the context's progress thread: record, wake main, return soon. */
static void on_event(const remora_event_t *ev, void *arg)
{
    const char *watched = arg;

    if (ev->name != NULL && strcmp(ev->name, watched) != 0)
        return;
    pthread_mutex_lock(&lock);
    last = *ev;
    last.name = NULL;
    have_event = 1;
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
}

int main(int argc, char **argv)
{
    const char *name = argc > 2 ? argv[2] : "greeting";
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_EVENT_CB,
                                 .event_cb   = on_event,
                                 .event_arg  = (void *)name};
    remora_context_h ctx;
    remora_client_h client;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE |
                                               REMORA_REGION_INFO_FIELD_GENERATION};
    char text[128] = {0};

    if (argc < 2) {
        fprintf(stderr, "usage: guide_watch HOST:PORT [NAME]\n");
        return 2;
    }
    CHECK(remora_context_create(NULL, &ctx));
    CHECK(remora_client_connect(ctx, argv[1], &cp, &client));
    CHECK(remora_client_lookup(client, name, &info));
    printf("watching %s (%" PRIu64 " bytes, generation %" PRIu64 ")\n", name, info.size,
           info.generation);
    fflush(stdout);

    pthread_mutex_lock(&lock);
    while (!have_event)
        pthread_cond_wait(&changed, &lock);
    remora_event_t ev = last;
    pthread_mutex_unlock(&lock);

    switch (ev.type) {
    case REMORA_EVENT_REGION_CHANGED:
        printf("changed: %" PRIu64 " bytes, generation %" PRIu64 "\n", ev.size, ev.generation);
        /* Reads now see the new memory. */
        CHECK(remora_client_read(client, name, 0, text, sizeof(text) - 1));
        printf("now reads: %s", text);
        break;
    case REMORA_EVENT_REGION_REMOVED:
        printf("removed\n");
        break;
    default:
        printf("disconnected: %s\n", remora_status_string(ev.status));
        break;
    }
    remora_client_disconnect(client);
    remora_context_destroy(ctx);
    return ev.type == REMORA_EVENT_REGION_CHANGED ? 0 : 1;
}
