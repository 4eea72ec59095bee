/* The C API from C (C99): load stories260K, generate its published greedy story, continue the
 * conversation, tokenize, render a chat. Built in the tree (ctest capi.smoke) and, by
 * install_test.sh, out of the tree against an installed vkllm through pkg-config and CMake.
 *
 *   smoke MODEL.gguf EXPECTED.txt [--validation]
 *
 * Exit 0 when every check holds; otherwise each failed check is printed and the exit code is 1. */
#include <vkllm/vkllm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int validation_errors = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "smoke.c:%d: CHECK(%s) failed; last error: %s\n", __LINE__, \
                    #cond, vkllm_last_error());                                       \
            ++failures;                                                               \
        }                                                                             \
    } while (0)

typedef struct {
    char* data;
    size_t len, cap;
    int pieces;
} Text;

static int append_piece(const char* utf8, size_t len, void* user_data) {
    Text* t = (Text*)user_data;
    if (utf8[len] != '\0') ++failures; /* pieces are NUL-terminated too */
    if (t->len + len + 1 > t->cap) {
        size_t cap = (t->len + len + 1) * 2;
        char* grown = (char*)realloc(t->data, cap);
        if (!grown) return 1;
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, utf8, len);
    t->len += len;
    t->data[t->len] = '\0';
    ++t->pieces;
    return 0;
}

static void on_log(vkllm_log_level level, const char* message, void* user_data) {
    (void)user_data;
    if (level == VKLLM_LOG_ERROR) {
        fprintf(stderr, "vkllm error message: %s\n", message);
        ++validation_errors;
    }
}

static char* read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf EXPECTED.txt [--validation]\n", argv[0]);
        return 2;
    }
    size_t expected_len = 0;
    char* expected = read_file(argv[2], &expected_len);
    if (!expected) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }
    printf("vkllm %s\n", vkllm_version());

    uint32_t n_devices = 0;
    CHECK(vkllm_device_count(&n_devices) == VKLLM_OK);
    CHECK(n_devices >= 1);
    if (n_devices >= 1) {
        vkllm_device_info dev;
        dev.struct_size = sizeof(dev);
        CHECK(vkllm_device_get_info(0, &dev) == VKLLM_OK);
        printf("device 0: %s (%s), Vulkan %u.%u\n", dev.name, dev.driver, dev.api_version_major, dev.api_version_minor);
    }

    vkllm_model_params mp = vkllm_model_default_params();
    mp.validation = argc > 3 && strcmp(argv[3], "--validation") == 0;
    mp.log = on_log;
    mp.cache_dir = "";
    vkllm_model* model = NULL;
    vkllm_status st = vkllm_model_load(argv[1], &mp, &model);
    if (st != VKLLM_OK) {
        fprintf(stderr, "vkllm_model_load: %s: %s\n", vkllm_status_name(st), vkllm_last_error());
        return 1;
    }
    vkllm_model_info info;
    info.struct_size = sizeof(info);
    CHECK(vkllm_model_get_info(model, &info) == VKLLM_OK);
    printf("model: %s, %u layers, vocab %u, context %u, template %s\n", info.architecture, info.n_layers, info.n_vocab,
           info.n_ctx, info.chat_template);

    vkllm_session* session = NULL;
    vkllm_session_params sp = vkllm_session_default_params();
    CHECK(vkllm_session_new(model, &sp, &session) == VKLLM_OK);

    /* The published story: BOS only, 200 greedy tokens. */
    vkllm_sampling greedy = vkllm_sampling_default();
    greedy.temperature = 0.0f;
    greedy.n_predict = 200;
    Text story = {NULL, 0, 0, 0};
    CHECK(vkllm_generate(session, "", &greedy, append_piece, &story) == VKLLM_OK);
    CHECK(story.data != NULL && story.len == expected_len && memcmp(story.data, expected, expected_len) == 0);
    vkllm_generation_stats stats;
    stats.struct_size = sizeof(stats);
    CHECK(vkllm_session_get_stats(session, &stats) == VKLLM_OK);
    CHECK(stats.prompt_tokens == 1 && stats.generated_tokens == 200 && stats.finish == VKLLM_FINISH_LENGTH);
    printf("story: %d pieces, %zu bytes, %s; prompt %.1f t/s, generation %.1f t/s\n", story.pieces, story.len,
           story.len == expected_len && memcmp(story.data, expected, expected_len) == 0 ? "matches" : "DIFFERS",
           stats.prompt_tokens_per_s, stats.generate_tokens_per_s);

    /* The conversation goes on: only the new tokens are evaluated. */
    Text more = {NULL, 0, 0, 0};
    greedy.n_predict = 8;
    CHECK(vkllm_generate(session, " The end.", &greedy, append_piece, &more) == VKLLM_OK);
    CHECK(vkllm_session_get_stats(session, &stats) == VKLLM_OK);
    CHECK(stats.cached_tokens >= 200 && stats.n_past > 201);

    /* A reset session starts over with BOS: the same story again. */
    CHECK(vkllm_session_reset(session) == VKLLM_OK);
    Text again = {NULL, 0, 0, 0};
    greedy.n_predict = 200;
    CHECK(vkllm_generate(session, "", &greedy, append_piece, &again) == VKLLM_OK);
    CHECK(again.len == story.len && story.data && again.data && memcmp(again.data, story.data, story.len) == 0);

    /* Tokens round trip. */
    const char* text = "Once upon a time, there was a little girl.";
    size_t n_tokens = 0;
    CHECK(vkllm_tokenize(model, text, strlen(text), false, false, NULL, 0, &n_tokens) == VKLLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n_tokens > 0 && n_tokens < 64);
    int32_t tokens[64];
    CHECK(vkllm_tokenize(model, text, strlen(text), false, false, tokens, 64, &n_tokens) == VKLLM_OK);
    char back[256];
    size_t back_len = 0;
    CHECK(vkllm_detokenize(model, tokens, n_tokens, back, sizeof back, &back_len) == VKLLM_OK);
    CHECK(back_len == strlen(text) && strcmp(back, text) == 0);

    /* A chat through the template (the built-in Llama 2 one: this file carries none). */
    vkllm_chat_message msgs[2] = {{"system", "You tell stories."}, {"user", "Tell me about a cat."}};
    char rendered[1024];
    size_t rendered_len = 0;
    CHECK(vkllm_apply_chat_template(model, msgs, 2, true, rendered, sizeof rendered, &rendered_len) == VKLLM_OK);
    CHECK(strstr(rendered, "Tell me about a cat.") != NULL);
    Text answer = {NULL, 0, 0, 0};
    greedy.n_predict = 16;
    CHECK(vkllm_chat(session, msgs, 2, &greedy, append_piece, &answer) == VKLLM_OK);
    CHECK(answer.len > 0);

    vkllm_session_free(session);
    vkllm_model_free(model);
    CHECK(validation_errors == 0);
    free(story.data);
    free(more.data);
    free(again.data);
    free(answer.data);
    free(expected);
    if (failures) {
        fprintf(stderr, "smoke: %d checks failed\n", failures);
        return 1;
    }
    printf("smoke: all checks passed\n");
    return 0;
}
