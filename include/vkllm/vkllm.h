/*
 * vkllm.h: the C API of vkllm, a Vulkan runtime for decoder-only transformers in GGUF files.
 *
 * Valid C99 and C++. Opaque handles, plain structs and callbacks cross the boundary; no C++ type
 * and no exception ever does. Every function that can fail returns a vkllm_status, and
 * vkllm_last_error() then says what went wrong, in English, naming the problem.
 *
 * A minimal program:
 *
 *     vkllm_model* model = NULL;
 *     vkllm_model_params mp = vkllm_model_default_params();
 *     if (vkllm_model_load("stories260K.gguf", &mp, &model) != VKLLM_OK) {
 *         fprintf(stderr, "%s\n", vkllm_last_error());
 *         return 1;
 *     }
 *     vkllm_session* s = NULL;
 *     vkllm_session_params sp = vkllm_session_default_params();
 *     vkllm_session_new(model, &sp, &s);
 *     vkllm_sampling smp = vkllm_sampling_default();
 *     smp.temperature = 0.0f;                                  // greedy
 *     vkllm_generate(s, "Once upon a time", &smp, print_piece, NULL);
 *     vkllm_session_free(s);
 *     vkllm_model_free(model);
 *
 * THREADS
 *   - vkllm_last_error() is per thread: it describes the last failure of a call made on the
 *     calling thread.
 *   - A model may be used from several threads at once: vkllm_tokenize, vkllm_detokenize,
 *     vkllm_apply_chat_template, vkllm_model_get_info, vkllm_session_new and vkllm_embed are
 *     thread-safe (vkllm_embed calls on one model run one after another).
 *   - A session runs one generation at a time, on the thread that called vkllm_generate or
 *     vkllm_chat; callbacks run on that thread, before the call returns. A second generation on the
 *     same session while one runs fails with VKLLM_ERR_BUSY. Different sessions of one model may
 *     generate at the same time from different threads: their tokens are computed in shared
 *     batches, and each session's text is the same as if it ran alone.
 *   - vkllm_cancel() may be called from any thread, also from a callback.
 *   - vkllm_session_free() and vkllm_model_free() must not run while another thread uses the same
 *     handle (or, for a model, one of its sessions). A session that is generating is not freed
 *     (the call sets the last error and does nothing; so is a model with such a session).
 *     vkllm_model_free() also frees the sessions of the model that are still open; their handles
 *     become invalid.
 *   - Callbacks must return normally (no longjmp, no C++ exception out of them) and must not free
 *     the session or model they are called for. The log callback may run on any thread, vkllm's
 *     own scheduling thread included.
 *
 * HANDLES
 *   NULL, a freed handle and a pointer vkllm never returned give VKLLM_ERR_INVALID_HANDLE (live
 *   handles are tracked), not a crash, as long as the freed handle's memory has not been reused
 *   for a newer handle: do not use handles after freeing them. The free functions accept NULL
 *   and unknown handles.
 *
 * STRUCTS
 *   Every params struct starts with `struct_size`, set by its *_default* function: always start
 *   from that function and change fields. Structs only grow, at the end, and within a major
 *   version (the SONAME) the library accepts every older, shorter struct; a release that grows a
 *   struct returned by value keeps the old layout for programs built before it through symbol
 *   versions (the exports carry version nodes, VKLLM_0 for this one).
 *
 * TEXT
 *   All text is UTF-8. Pieces passed to callbacks are whole UTF-8 characters: a token that ends
 *   inside a character is held until the character is complete.
 */
#ifndef VKLLM_VKLLM_H
#define VKLLM_VKLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define VKLLM_API
#else
#define VKLLM_API __attribute__((visibility("default")))
#endif

#define VKLLM_VERSION_MAJOR 0
#define VKLLM_VERSION_MINOR 2
#define VKLLM_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkllm_model vkllm_model;
typedef struct vkllm_session vkllm_session;

typedef enum vkllm_status {
    VKLLM_OK = 0,
    VKLLM_CANCELLED = 1, /* stopped by vkllm_cancel, by on_piece, or by a progress callback */
    VKLLM_ERR_INVALID_ARGUMENT = 2, /* a NULL pointer where one is needed, a value out of range, a wrong struct_size */
    VKLLM_ERR_INVALID_HANDLE = 3, /* a handle that is not live: freed, or never returned by vkllm */
    VKLLM_ERR_FILE = 4, /* a file that does not exist or cannot be read */
    VKLLM_ERR_MODEL = 5, /* a malformed GGUF file, an unsupported architecture or tensor type */
    VKLLM_ERR_DEVICE = 6, /* no Vulkan loader or device, a device that lacks what vkllm needs, a Vulkan error */
    VKLLM_ERR_OUT_OF_MEMORY = 7, /* the model, context or sessions do not fit the device */
    VKLLM_ERR_CONTEXT_FULL = 8, /* the prompt (with the conversation so far) does not fit the session's context */
    VKLLM_ERR_BUSY = 9, /* the session is generating on another thread, or all sessions are in use */
    VKLLM_ERR_TEMPLATE = 10, /* the chat template failed to render the messages */
    VKLLM_ERR_BUFFER_TOO_SMALL = 11, /* the output buffer is too small; the needed size was written */
    VKLLM_ERR_INTERNAL = 12 /* anything else; the message says what */
} vkllm_status;

/* "VKLLM_OK", "VKLLM_ERR_FILE", ...; "unknown status" for other values. Never NULL. */
VKLLM_API const char* vkllm_status_name(vkllm_status status);

/* What went wrong in the last vkllm call on this thread, when it returned a status other than
 * VKLLM_OK ("" after a call that succeeded). Valid until the next vkllm call on this thread.
 * Never NULL. */
VKLLM_API const char* vkllm_last_error(void);

/* The library's version, "MAJOR.MINOR.PATCH". */
VKLLM_API const char* vkllm_version(void);

/* ---------------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------------- */

typedef enum vkllm_device_type {
    VKLLM_DEVICE_OTHER = 0,
    VKLLM_DEVICE_INTEGRATED_GPU = 1,
    VKLLM_DEVICE_DISCRETE_GPU = 2,
    VKLLM_DEVICE_VIRTUAL_GPU = 3,
    VKLLM_DEVICE_CPU = 4
} vkllm_device_type;

typedef struct vkllm_device_info {
    size_t struct_size; /* set to sizeof(vkllm_device_info) before the call */
    uint32_t index; /* what vkllm_model_params.device_index takes */
    char name[256];
    char driver[256]; /* driver name and version */
    vkllm_device_type type;
    uint32_t vendor_id, device_id;
    uint32_t api_version_major, api_version_minor, api_version_patch;
    uint64_t device_local_memory; /* bytes of the largest device-local heap */
    uint32_t subgroup_size;
    bool fp16, int8; /* shader arithmetic in 16-bit floats / 8-bit integers */
} vkllm_device_info;

/* The Vulkan devices present, in the order `vkllm devices` lists them. */
VKLLM_API vkllm_status vkllm_device_count(uint32_t* count);
/* Fills `info` (its struct_size set by the caller) for device `index`. */
VKLLM_API vkllm_status vkllm_device_get_info(uint32_t index, vkllm_device_info* info);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */

typedef enum vkllm_kv_type {
    VKLLM_KV_F16 = 0, /* default */
    VKLLM_KV_F32 = 1,
    VKLLM_KV_Q8_0 = 2 /* blocks of 32 int8 values and an f32 scale: 0.56x the memory of f16; needs
                          n_kv_heads * head_dim to be a multiple of 32 (VKLLM_ERR_INVALID_ARGUMENT) */
} vkllm_kv_type;

typedef enum vkllm_log_level { VKLLM_LOG_INFO = 0, VKLLM_LOG_WARNING = 1, VKLLM_LOG_ERROR = 2 } vkllm_log_level;

/* Loading progress, `fraction` from 0 to 1 (weights uploaded). Return non-zero to stop loading:
 * vkllm_model_load then returns VKLLM_CANCELLED. Runs on the loading thread. */
typedef int (*vkllm_progress_fn)(float fraction, void* user_data);
/* Messages of the model: warnings about the file, and Khronos validation messages when
 * `validation` is on. May run on any thread that uses the model or its sessions. */
typedef void (*vkllm_log_fn)(vkllm_log_level level, const char* message, void* user_data);

typedef struct vkllm_model_params {
    size_t struct_size;
    int32_t device_index; /* -1 (default): the first device vkllm can use */
    const char* device_name; /* NULL (default), or a substring of a device's name: overrides device_index */
    const char* caps; /* NULL (default), or capability overrides as `vkllm --caps` takes them,
                                    e.g. "no-fp16,no-subgroup-ops" (to run as a weaker device would) */
    uint32_t n_ctx; /* tokens of context per session; 0 (default): the model's, capped by memory
                                    (an embedding model's: at most 8192, a causal one's at most 2048) */
    uint32_t max_sessions; /* sessions open at once, each with its own KV cache; 1..64, default 1 */
    vkllm_kv_type kv_type; /* KV cache element type; default VKLLM_KV_F16 */
    uint32_t ubatch; /* prompt tokens per forward pass; 0 (default): 64; an encoder's: its
                                    context (an input is evaluated at once); a decoder embedding
                                    model's: 512 (at most its context); at most 8192 */
    const char* chat_template; /* NULL (default): the model's own (a model whose template cannot
                                    be parsed still loads: vkllm_chat then fails, the log says why),
                                    else a built-in name ("chatml", "llama3", ...) or a file holding
                                    a Jinja template, which must parse */
    const char* cache_dir; /* pipeline cache folder; NULL (default): the user's cache folder;
                                    "" : no cache on disk */
    bool validation; /* Khronos validation layer (slow; for debugging); default false */
    vkllm_progress_fn progress; /* NULL (default): none */
    void* progress_user_data;
    vkllm_log_fn log; /* NULL (default): messages are dropped */
    void* log_user_data;
    const char* pooling; /* NULL (default): the file's pooling type; "mean", "cls" or "last":
                                    vkllm_embed's pooling, which also makes a decoder whose file names
                                    none an embedding model (as llama-server --embeddings --pooling) */
    const char* devices; /* NULL (default): one device (device_index / device_name); else the
                                    model's layers split over these devices, as `vkllm --devices`:
                                    indices or name substrings, comma-separated ("0,1"); a decoder only */
    const char* split; /* NULL (default): with `devices`, layers by each device's memory;
                                    else as `vkllm --split`: "layer" or "layer:3,1" (ratios) */
    uint32_t kv_budget; /* tokens of KV cache that all sessions share (one paged pool, blocks
                                    handed out as conversations grow); 0 (default): max_sessions x n_ctx.
                                    Smaller lets many sessions stay open in little memory. A turn
                                    reserves its prompt plus n_predict (n_ctx when -1) and
                                    waits while the running turns' reservations fill the pool; idle
                                    sessions' cached conversations are dropped, least recently used
                                    first, to make room (their next turn evaluates them again).
                                    n_ctx defaults to at most kv_budget, so every turn fits alone. */
    const char* mmproj; /* NULL (default): none; else the model's vision encoder (llama.cpp's mmproj
                                    GGUF: gemma3, idefics3, mlp projectors) on the same device, so that
                                    vkllm_chat_images takes pictures */
    uint64_t image_max_pixels; /* the largest image (width x height) vkllm_chat_images decodes, checked
                                    before decoding; 0 (default): 8192 x 8192 */
    /* Speculative decoding (docs/serving.md#speculative-decoding): guessed tokens verified in one
     * pass with the next; the text is what plain decoding gives, only sooner when guesses are right. */
    const char* draft_model; /* NULL (default): none; else a smaller model of the same vocabulary
                                    that drafts, on the model's (first) device; a vocabulary that
                                    differs is VKLLM_ERR_MODEL naming the difference */
    uint32_t lookup; /* 0 (default): off; else drafts by prompt lookup, from where the context's
                                    last tokens (n-grams of up to `lookup`, at most 8) occurred before;
                                    not with draft_model */
    uint32_t draft_max; /* tokens drafted and verified per step; 0 (default): 8; at most 32 */
    uint32_t draft_min; /* shorter drafts are not verified; 0 (default): 1 */
    /* CacheBlend (docs/serving.md#cacheblend-document-kv-reused-at-any-position): the documents of
     * vkllm_generate_documents reused from a document store wherever they appear, a share of their
     * tokens evaluated again, instead of evaluated whole. The answer is close to, not the same as,
     * a full evaluation's. */
    bool blend; /* false (default): vkllm_generate_documents evaluates documents as text; a model
                                    that cannot blend (latent attention, sliding windows, ...) is
                                    VKLLM_ERR_MODEL naming why */
    float blend_ratio; /* share of each document's tokens evaluated again; 0 (default): 0.15; at most 1 */
    const char* kv_store; /* NULL (default): the store in memory only; else a directory where what
                                    leaves the memory budget goes (and is found again by later loads) */
    uint32_t kv_store_mib; /* the store's memory budget, MiB; 0 (default): 1024 */
} vkllm_model_params;

VKLLM_API vkllm_model_params vkllm_model_default_params(void);

/* Opens a GGUF file, picks the device, checks that the model fits, uploads the weights. */
VKLLM_API vkllm_status vkllm_model_load(const char* path, const vkllm_model_params* params, vkllm_model** out);
/* NULL is fine. Also frees the model's open sessions. */
VKLLM_API void vkllm_model_free(vkllm_model* model);

typedef struct vkllm_model_info {
    size_t struct_size; /* set to sizeof(vkllm_model_info) before the call */
    char architecture[64]; /* "llama", "qwen2", "gemma3", ... */
    char device[256]; /* the device it runs on ("A + B" for a model split over devices) */
    char chat_template[64]; /* the template's name: "model" for the file's own, else built-in or file
                                      name; "" when the file's own cannot be used (vkllm_chat then fails) */
    uint32_t n_vocab, n_layers, dim, n_heads, n_kv_heads, head_dim;
    uint32_t n_ctx; /* tokens of context per session */
    uint32_t n_ctx_train; /* the context the model was trained with */
    uint32_t max_sessions; /* 0 for an embedding model (it has no sessions) */
    int32_t bos_token, eos_token; /* -1 when the vocabulary has none */
    uint64_t weights_bytes, kv_cache_bytes, scratch_bytes; /* device memory (a split's: of all its devices) */
    bool embeddings; /* an embedding model or a reranker (an encoder such as BERT, or a
                                      decoder whose file or params name a pooling, as Qwen3-Embedding):
                                      vkllm_embed (or vkllm_rerank) works, sessions do not */
    uint32_t embedding_dim; /* values per embedding (0 for other models) */
    uint32_t max_embed_tokens; /* the longest input vkllm_embed takes, [CLS] and [SEP] included (a
                                      reranker: query and document together) */
    char pooling[16]; /* "mean", "cls", "last", "none" (one vector per token: vkllm_embed
                                      refuses), "rank" (a reranker: vkllm_rerank) */
    uint32_t kv_budget; /* tokens the sessions' shared KV pool holds (kv_budget rounded up to
                                      whole blocks, or max_sessions x n_ctx); 0 for an embedding model */
    bool vision; /* loaded with a vision encoder (vkllm_model_params.mmproj): takes images */
} vkllm_model_info;

VKLLM_API vkllm_status vkllm_model_get_info(const vkllm_model* model, vkllm_model_info* info);

/* ---------------------------------------------------------------------------------------------
 * Tokens and chat templates
 * ------------------------------------------------------------------------------------------- */

/* Token ids of `text` (`len` bytes; it need not be NUL-terminated). add_special: BOS/EOS as the
 * vocabulary asks. parse_special: the text of control tokens ("<|im_start|>") becomes those tokens.
 * Writes at most `capacity` ids into `tokens` and the count into *n_tokens; when capacity is too
 * small, writes the count needed and returns VKLLM_ERR_BUFFER_TOO_SMALL (tokens may be NULL
 * with capacity 0 to ask for the size). */
VKLLM_API vkllm_status vkllm_tokenize(const vkllm_model* model, const char* text, size_t len, bool add_special,
                                      bool parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens);

/* The text of `n` token ids, NUL-terminated in `buf`; *len gets its length without the NUL. When
 * `capacity` < length + 1, writes the length and returns VKLLM_ERR_BUFFER_TOO_SMALL. */
VKLLM_API vkllm_status vkllm_detokenize(const vkllm_model* model, const int32_t* tokens, size_t n, char* buf,
                                        size_t capacity, size_t* len);

typedef struct vkllm_chat_message {
    const char* role; /* "system", "user", "assistant", ... */
    const char* content; /* UTF-8 text */
} vkllm_chat_message;

/* The prompt text the model's chat template (or vkllm_model_params.chat_template) makes of
 * `messages`, NUL-terminated in `buf`, with the assistant's turn opened when add_generation_prompt.
 * Buffer rules as vkllm_detokenize. */
VKLLM_API vkllm_status vkllm_apply_chat_template(const vkllm_model* model, const vkllm_chat_message* messages,
                                                 size_t n_messages, bool add_generation_prompt, char* buf,
                                                 size_t capacity, size_t* len);

/* ---------------------------------------------------------------------------------------------
 * Sessions and generation
 * ------------------------------------------------------------------------------------------- */

typedef struct vkllm_session_params {
    size_t struct_size;
    bool parse_special; /* vkllm_generate: control-token texts in the prompt become control tokens; default false */
} vkllm_session_params;

VKLLM_API vkllm_session_params vkllm_session_default_params(void);

#define VKLLM_SEED_RANDOM UINT64_MAX

typedef struct vkllm_sampling {
    size_t struct_size;
    float temperature; /* 0: greedy (argmax); default 0.8 */
    int32_t top_k; /* <= 0: off; default 40 */
    float top_p; /* 1: off; default 0.95 */
    float min_p; /* 0: off; default 0.05 */
    float repeat_penalty; /* 1: off (default) */
    int32_t repeat_last_n; /* tokens the repeat penalty looks back over; default 64 */
    float presence_penalty; /* -2..2, 0: off (default); over generated tokens */
    float frequency_penalty; /* -2..2, 0: off (default); over generated tokens */
    int32_t n_predict; /* tokens to generate; default 128; -1: until an end token or a full context */
    uint64_t seed; /* default VKLLM_SEED_RANDOM: a new seed each call */
    const char* const* stop; /* stop strings (not part of the text); NULL (default) */
    size_t n_stop;
    bool ignore_eos; /* go on past end-of-generation tokens; default false */
    /* The structure of the output, at most one of the two (NULL: free text, the default): a GBNF
     * grammar (llama.cpp's syntax), or a JSON Schema (docs/structured-output.md has the subset).
     * One that cannot be enforced exactly is VKLLM_ERR_INVALID_ARGUMENT naming the line and column
     * or the schema keyword, before anything runs. */
    const char* grammar;
    const char* json_schema;
} vkllm_sampling;

VKLLM_API vkllm_sampling vkllm_sampling_default(void);

/* A piece of generated text: `len` bytes of whole UTF-8 characters, also NUL-terminated. Return
 * non-zero to stop the generation (it then returns VKLLM_CANCELLED). */
typedef int (*vkllm_piece_fn)(const char* utf8, size_t len, void* user_data);

/* A session: a conversation with its own KV cache, at most max_sessions per model at once
 * (VKLLM_ERR_BUSY beyond). */
VKLLM_API vkllm_status vkllm_session_new(vkllm_model* model, const vkllm_session_params* params, vkllm_session** out);
/* NULL is fine. */
VKLLM_API void vkllm_session_free(vkllm_session* session);
/* Forgets the conversation: the next vkllm_generate starts a new text (with BOS). VKLLM_ERR_BUSY
 * while the session generates. */
VKLLM_API vkllm_status vkllm_session_reset(vkllm_session* session);

/* Continues the session's text with `prompt` and generates after it, passing the generated text
 * (never the prompt) to on_piece piece by piece (on_piece may be NULL). On a new or reset
 * session the prompt starts with BOS where the vocabulary wants one; "" then means BOS only, as
 * in `vkllm run -p ""`. Later calls continue the same text: only the new tokens are evaluated.
 * Stops at an end-of-generation token, a stop string, n_predict tokens or a full context
 * (VKLLM_OK), or on cancellation (VKLLM_CANCELLED; the text passed to on_piece so far stays in the
 * conversation). The conversation keeps the tokens of a stop string, not an end token. */
VKLLM_API vkllm_status vkllm_generate(vkllm_session* session, const char* prompt, const vkllm_sampling* sampling,
                                      vkllm_piece_fn on_piece, void* user_data);

/* vkllm_generate of a prompt made of parts: `prefix`, then each of the n_documents `documents`, then
 * `question` (each tokenized on its own, so that a document has the same tokens wherever it
 * appears; the prefix starts with BOS on a new or reset session; none of them may be NULL, "" is
 * fine). On a model loaded with vkllm_model_params.blend, the documents are taken from the model's
 * document store (evaluated alone and stored the first time) and blended in, when a question
 * follows them; else they are evaluated as the rest of the prompt. */
VKLLM_API vkllm_status vkllm_generate_documents(vkllm_session* session, const char* prefix,
                                                const char* const* documents, size_t n_documents, const char* question,
                                                const vkllm_sampling* sampling, vkllm_piece_fn on_piece,
                                                void* user_data);

/* Answers a conversation: renders `messages` (the whole conversation so far, oldest first) with
 * the chat template, opens the assistant's turn and generates the answer as vkllm_generate does.
 * The session keeps what it computed: when the next call passes the same messages plus the answer
 * and a new message, only the tokens after the common start are evaluated. The rendered text is
 * tokenized with control tokens parsed (templates write them), so the texts of control tokens
 * inside message contents ("<|im_end|>") become control tokens too. */
VKLLM_API vkllm_status vkllm_chat(vkllm_session* session, const vkllm_chat_message* messages, size_t n_messages,
                                  const vkllm_sampling* sampling, vkllm_piece_fn on_piece, void* user_data);

/* An image of a chat message: the bytes of a PNG, JPEG, WebP, GIF (first frame) or BMP file. */
typedef struct vkllm_chat_image {
    size_t message; /* the index of the message it belongs to */
    const void* data;
    size_t len;
} vkllm_chat_image;

/* vkllm_chat with pictures, for a model loaded with a vision encoder (vkllm_model_params.mmproj;
 * VKLLM_ERR_INVALID_ARGUMENT otherwise). A message's images go before its text, in the array's
 * order, unless its content marks their places with "<__media__>" (one marker per image of that
 * message). Each image is decoded, prepared as llama.cpp's mtmd prepares it for the projector and
 * encoded on the device; the session's cache keys images by their pixels, so a conversation that
 * goes on about the same picture does not encode or evaluate it again. A file that cannot be
 * decoded, a picture over image_max_pixels or a marker count that does not match is
 * VKLLM_ERR_INVALID_ARGUMENT naming the image; more image tokens than the context holds is
 * VKLLM_ERR_CONTEXT_FULL. */
VKLLM_API vkllm_status vkllm_chat_images(vkllm_session* session, const vkllm_chat_message* messages, size_t n_messages,
                                         const vkllm_chat_image* images, size_t n_images,
                                         const vkllm_sampling* sampling, vkllm_piece_fn on_piece, void* user_data);

/* Stops the session's running generation (VKLLM_CANCELLED from it): once vkllm_cancel has returned,
 * on_piece is not called again for it. Nothing when none runs. Any thread. */
VKLLM_API vkllm_status vkllm_cancel(vkllm_session* session);

typedef enum vkllm_finish_reason {
    VKLLM_FINISH_NONE = 0, /* no generation finished yet */
    VKLLM_FINISH_STOP = 1, /* an end-of-generation token or a stop string */
    VKLLM_FINISH_LENGTH = 2, /* n_predict tokens, or the context is full */
    VKLLM_FINISH_CANCELLED = 3,
    VKLLM_FINISH_ERROR = 4
} vkllm_finish_reason;

typedef struct vkllm_generation_stats {
    size_t struct_size; /* set to sizeof(vkllm_generation_stats) before the call */
    uint32_t prompt_tokens; /* tokens of the prompt, the conversation before it included */
    uint32_t cached_tokens; /* of which reused from the session's cache */
    uint32_t generated_tokens; /* by the engine; after a stop by on_piece or vkllm_cancel it may
                                    exceed what reached the caller (the engine runs ahead of the
                                    callback), and only what reached the caller joins the conversation */
    uint32_t n_past; /* tokens in the session's conversation now */
    double prompt_ms; /* evaluating the new prompt tokens, to the first generated token */
    double generate_ms; /* the rest */
    double prompt_tokens_per_s; /* (prompt_tokens - cached_tokens) / prompt time */
    double generate_tokens_per_s;
    vkllm_finish_reason finish;
    uint32_t draft_tokens; /* speculative decoding: tokens drafted and verified */
    uint32_t accepted_tokens; /* of which kept (each a token without a forward pass of its own) */
    /* CacheBlend (vkllm_generate_documents on a model loaded with blend): */
    uint32_t blended_documents; /* documents blended in rather than evaluated (0: none) */
    uint32_t stored_documents; /* of which the document store held */
    uint32_t blended_tokens; /* the blended documents' tokens */
    uint32_t recomputed_tokens; /* of which evaluated again */
} vkllm_generation_stats;

/* Statistics of the session's last finished generation. */
VKLLM_API vkllm_status vkllm_session_get_stats(const vkllm_session* session, vkllm_generation_stats* stats);

/* ---------------------------------------------------------------------------------------------
 * Tools: a conversation in OpenAI's JSON shapes (docs/structured-output.md#tool-calls)
 * ------------------------------------------------------------------------------------------- */

typedef struct vkllm_chat_json_params {
    size_t struct_size;
    /* OpenAI's messages array as JSON text (required): roles and contents (a string, or text parts,
     * joined by newlines), assistant turns with tool_calls (function.arguments as JSON text or an
     * object), "tool" turns with tool_call_id; checked as `vkllm serve` checks them (an invalid
     * argument naming the field: "messages[1].content[0].type"). */
    const char* messages;
    const char* tools; /* OpenAI's tools array as JSON text; NULL (default): none */
    /* NULL or "auto" (default): the model may call a tool; "none": it may not (the answer is not
     * parsed for calls); "required": it must call one; any other text: it must call the tool of
     * that name. A required call starts at once and its arguments follow the tool's parameter
     * schema (docs/structured-output.md has the subset). */
    const char* tool_choice;
    bool parallel_tool_calls; /* several calls in one answer where the model's format allows; default true */
    const char* template_kwargs; /* a JSON object of extra template variables ({"enable_thinking": false}); NULL */
    /* NULL, "auto" or "deepseek" (default): where the template writes reasoning blocks (<think>), the
     * answer's block is split off: on_piece gets the content only and vkllm_session_get_reasoning
     * the block. "none": the block stays in the content. */
    const char* reasoning_format;
} vkllm_chat_json_params;

VKLLM_API vkllm_chat_json_params vkllm_chat_json_default_params(void);

/* vkllm_chat for a conversation given as OpenAI JSON, with tools. on_piece receives the answer's
 * content only: tool-call markup never reaches it (text that may begin a call is held back until
 * it is decided). The calls the answer made are then read with vkllm_session_get_tool_calls. A
 * call the model wrote malformed comes back as content. Bad JSON, tools the model's template
 * format cannot parse, or a choice it cannot force: VKLLM_ERR_INVALID_ARGUMENT naming the field.
 * A required call cannot be combined with sampling's grammar, json_schema or stop strings. */
VKLLM_API vkllm_status vkllm_chat_json(vkllm_session* session, const vkllm_chat_json_params* params,
                                       const vkllm_sampling* sampling, vkllm_piece_fn on_piece, void* user_data);

/* The tool calls of the session's last vkllm_chat_json answer as OpenAI's tool_calls JSON array
 * ([{"id", "type": "function", "function": {"name", "arguments"}}]; "[]" when it made none or the
 * last generation was not a vkllm_chat_json). Buffer rules as vkllm_detokenize. */
VKLLM_API vkllm_status vkllm_session_get_tool_calls(const vkllm_session* session, char* buf, size_t capacity,
                                                    size_t* len);

/* The reasoning block of the session's last vkllm_chat_json answer, without its tags ("" when it had
 * none, reasoning_format was "none", or the last generation was not a vkllm_chat_json). Buffer
 * rules as vkllm_detokenize. */
VKLLM_API vkllm_status vkllm_session_get_reasoning(const vkllm_session* session, char* buf, size_t capacity,
                                                   size_t* len);

/* ---------------------------------------------------------------------------------------------
 * Embeddings (embedding models: vkllm_model_info.embeddings)
 * ------------------------------------------------------------------------------------------- */

/* The embedding of `text` (`len` bytes): tokenized with the model's special tokens ([CLS] ... [SEP]
 * for BERT), evaluated, pooled as the model says (vkllm_model_info.pooling), and normalised:
 * `normalize` -1 none, 0 max-abs scaled to the int16 range, 1 taxicab, 2 Euclidean (unit length;
 * what search wants), p > 2 the p-norm (llama.cpp's --embd-normalize). Writes embedding_dim floats
 * into `out` and that count into *n_out; with `capacity` too small (once the text is checked),
 * writes the count needed and returns VKLLM_ERR_BUFFER_TOO_SMALL (out may be NULL with capacity 0).
 * VKLLM_ERR_CONTEXT_FULL: more tokens than max_embed_tokens; VKLLM_ERR_INVALID_ARGUMENT: a model
 * that makes no embeddings, an empty text, a bad `normalize`; errors leave out and *n_out
 * untouched. Calls on one model from several threads run one after another. */
VKLLM_API vkllm_status vkllm_embed(vkllm_model* model, const char* text, size_t len, int32_t normalize, float* out,
                                   size_t capacity, size_t* n_out);

/* The embeddings of `n` texts (texts[i] of lens[i] bytes), each as vkllm_embed makes it, in as few
 * forward passes as the model allows (an encoder packs several texts into one): much faster than
 * one call per text. Writes n * embedding_dim floats into `out`, text i's from out[i *
 * embedding_dim], and that count into *n_out; buffer rules as vkllm_embed. Every text is checked
 * (tokenized) first; the errors are vkllm_embed's, naming the text's index, and leave out and
 * *n_out untouched. */
VKLLM_API vkllm_status vkllm_embed_batch(vkllm_model* model, const char* const* texts, const size_t* lens, size_t n,
                                         int32_t normalize, float* out, size_t capacity, size_t* n_out);

/* A reranker's (vkllm_model_info.pooling "rank") relevance of each of `n` documents (documents[i] of
 * lens[i] bytes) to `query`: writes n scores into `scores`, in document order, each the model's
 * unnormalised logit (higher: more relevant; llama-server's /v1/rerank relevance_score).
 * VKLLM_ERR_CONTEXT_FULL: a query and document together longer than max_embed_tokens;
 * VKLLM_ERR_INVALID_ARGUMENT: a model that is not a reranker, an empty query or document. */
VKLLM_API vkllm_status vkllm_rerank(vkllm_model* model, const char* query, size_t query_len,
                                    const char* const* documents, const size_t* lens, size_t n, float* scores);

#ifdef __cplusplus
}
#endif

#endif /* VKLLM_VKLLM_H */
