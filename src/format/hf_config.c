/* format/hf_config.c: see hf_config.h. Defaults follow transformers' config classes. */
#include "format/hf_config.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(j) ? NULL : j;
}

/* Reads an integer field in [lo, hi]; absent fields take def (def < lo: required). */
static int get_int(const cJSON *o, const char *k, long lo, long hi, long def, const char *label,
                   int *out) {
    const cJSON *j = field(o, k);
    if (!j) {
        if (def < lo) {
            log_error("%s: required field \"%s\" is missing", label, k);
            return ERR_FORMAT;
        }
        *out = (int)def;
        return OK;
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) {
        log_error("%s: \"%s\" must be an integer in [%ld, %ld]", label, k, lo, hi);
        return ERR_FORMAT;
    }
    *out = (int)d;
    return OK;
}

static int get_float(const cJSON *o, const char *k, double lo, double hi, double def,
                     const char *label, float *out) {
    const cJSON *j = field(o, k);
    if (!j) {
        *out = (float)def;
        return OK;
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(d >= lo && d <= hi)) {
        log_error("%s: \"%s\" must be a number in [%g, %g]", label, k, lo, hi);
        return ERR_FORMAT;
    }
    *out = (float)d;
    return OK;
}

static int get_bool(const cJSON *o, const char *k, int def, const char *label, int *out) {
    const cJSON *j = field(o, k);
    if (!j) {
        *out = def;
        return OK;
    }
    if (!cJSON_IsBool(j)) {
        log_error("%s: \"%s\" must be true or false", label, k);
        return ERR_FORMAT;
    }
    *out = cJSON_IsTrue(j);
    return OK;
}

/* eos_token_id may be an integer or a list of integers; ids are merged into cfg. */
static int add_eos(const cJSON *o, const char *label, struct hf_config *c) {
    const cJSON *j = field(o, "eos_token_id");
    if (!j) return OK;
    const cJSON *items = cJSON_IsArray(j) ? j->child : j;
    for (const cJSON *it = items; it; it = cJSON_IsArray(j) ? it->next : NULL) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
        if (!(d >= 0 && d < 1e9) || d != floor(d)) {
            log_error("%s: \"eos_token_id\" must be a token id or a list of them", label);
            return ERR_FORMAT;
        }
        if (!hf_config_is_eos(c, (int32_t)d) && c->n_eos < HF_MAX_EOS)
            c->eos_ids[c->n_eos++] = (int32_t)d;
    }
    return OK;
}

static int parse_rope(const cJSON *root, const char *label, struct hf_config *c) {
    const cJSON *params = field(root, "rope_parameters");
    const cJSON *scaling = field(root, "rope_scaling");
    if (params && !cJSON_IsObject(params)) params = NULL;
    int rc = get_float(root, "rope_theta", 1, 1e12, 10000.0, label, &c->rope_theta);
    if (!rc && params && field(params, "rope_theta"))
        rc = get_float(params, "rope_theta", 1, 1e12, 10000.0, label, &c->rope_theta);
    if (rc) return rc;
    if (!scaling && params) scaling = params;
    if (!scaling) return OK;
    if (!cJSON_IsObject(scaling)) {
        log_error("%s: \"rope_scaling\" must be an object or null", label);
        return ERR_FORMAT;
    }
    const cJSON *type = field(scaling, "rope_type");
    if (!type) type = field(scaling, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "default";
    if (strcmp(t, "default") == 0) return OK;
    if (strcmp(t, "llama3") != 0) {
        log_error("%s: rope type \"%.32s\" is not supported (default and llama3 are)", label, t);
        return ERR_UNSUPPORTED;
    }
    if ((rc = get_float(scaling, "factor", 1e-3, 1e6, -1, label, &c->rope_factor)) ||
        (rc = get_float(scaling, "low_freq_factor", 1e-6, 1e6, 1, label,
                        &c->rope_low_freq_factor)) ||
        (rc = get_float(scaling, "high_freq_factor", 1e-6, 1e6, 4, label,
                        &c->rope_high_freq_factor)) ||
        (rc = get_int(scaling, "original_max_position_embeddings", 1, 1 << 30, 8192, label,
                      &c->rope_orig_max_pos)))
        return rc;
    if (c->rope_factor <= 0 || c->rope_high_freq_factor <= c->rope_low_freq_factor) {
        log_error("%s: llama3 rope scaling needs factor > 0 and high_freq_factor > "
                  "low_freq_factor",
                  label);
        return ERR_FORMAT;
    }
    return OK;
}

/* A key of a block drafter's config, read from "dflash_config" first, then the top level. */
static const cJSON *drafter_field(const cJSON *root, const char *k) {
    const cJSON *dc = field(root, "dflash_config");
    const cJSON *j = cJSON_IsObject(dc) ? field(dc, k) : NULL;
    return j ? j : field(root, k);
}

static int parse_block_drafter(const cJSON *root, const char *label, struct hf_config *c) {
    int dspark = c->arch == ARCH_DSPARK;
    cJSON *tmp = cJSON_CreateObject(); /* gathers the keys wherever they were written */
    static const char *keys[] = {"block_size", "num_target_layers", "mask_token_id", "markov_rank",
                                 "target_layer_ids"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *j = drafter_field(root, keys[i]);
        if (j) cJSON_AddItemToObject(tmp, keys[i], cJSON_Duplicate(j, 1));
    }
    int rc;
    if ((rc = get_int(tmp, "block_size", 2, 256, dspark ? 7 : 16, label, &c->block_size)) ||
        (rc = get_int(tmp, "num_target_layers", 1, 1024, -1, label, &c->n_target_layers)) ||
        (rc = get_int(tmp, "mask_token_id", 0, 1 << 22, -1, label, &c->mask_token_id)) ||
        (rc = get_int(tmp, "markov_rank", 0, 1 << 16, 0, label, &c->markov_rank)) ||
        (rc = get_bool(root, "enable_confidence_head", 0, label, &c->confidence_head)) ||
        (rc = get_bool(root, "confidence_head_with_markov", 0, label, &c->confidence_with_markov)))
        goto done;
    if (!dspark) c->markov_rank = 0, c->confidence_head = 0;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tmp, "target_layer_ids");
    int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
    if (n < 1 || n > HF_MAX_TAPS) {
        log_error("%s: \"target_layer_ids\" must list 1 to %d target layers", label, HF_MAX_TAPS);
        rc = ERR_FORMAT;
        goto done;
    }
    for (const cJSON *it = ids->child; it; it = it->next) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(d >= 0 && d < c->n_target_layers) || d != floor(d)) {
            log_error("%s: target layer %g is outside [0, num_target_layers %d)", label, d,
                      c->n_target_layers);
            rc = ERR_FORMAT;
            goto done;
        }
        c->target_layer_ids[c->n_target_layer_ids++] = (int)d;
    }
done:
    cJSON_Delete(tmp);
    return rc;
}

int hf_config_parse(const char *json, size_t len, const char *label, struct hf_config *c) {
    memset(c, 0, sizeof *c);
    c->bos_id = -1;
    const char *why = "not an object";
    cJSON *root = json_parse(json, len, &why);
    int rc = OK;
    if (!cJSON_IsObject(root)) {
        log_error("%s: not a JSON object (%s)", label, why);
        rc = ERR_FORMAT;
        goto done;
    }
    const cJSON *archs = field(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *mt = field(root, "model_type");
    const char *name = cJSON_IsString(a0) ? a0->valuestring : "";
    const char *mtype = cJSON_IsString(mt) ? mt->valuestring : "";
    snprintf(c->arch_name, sizeof c->arch_name, "%s", *name ? name : mtype);
    if (!strcmp(name, "Qwen3ForCausalLM") || (!*name && !strcmp(mtype, "qwen3"))) {
        c->arch = ARCH_QWEN3;
    } else if (!strcmp(name, "Qwen2ForCausalLM") || (!*name && !strcmp(mtype, "qwen2"))) {
        c->arch = ARCH_QWEN2;
    } else if (!strcmp(name, "LlamaForCausalLM") || (!*name && !strcmp(mtype, "llama"))) {
        c->arch = ARCH_LLAMA;
    } else if (!strcmp(name, "MistralForCausalLM") || (!*name && !strcmp(mtype, "mistral"))) {
        c->arch = ARCH_MISTRAL;
    } else if (!strcmp(name, "Qwen3DSparkModel")) {
        c->arch = ARCH_DSPARK;
    } else if (!strcmp(name, "DFlashDraftModel")) {
        c->arch = ARCH_DFLASH;
    } else {
        log_error("%s: architecture \"%.60s\" is not supported", label, c->arch_name);
        log_hint("supported: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, "
                 "MistralForCausalLM");
        rc = ERR_UNSUPPORTED;
        goto done;
    }
    c->qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_DSPARK || c->arch == ARCH_DFLASH;
    if ((rc = get_int(root, "vocab_size", 1, 1 << 22, -1, label, &c->vocab_size)) ||
        (rc = get_int(root, "hidden_size", 1, 1 << 16, -1, label, &c->hidden_size)) ||
        (rc = get_int(root, "intermediate_size", 1, 1 << 20, -1, label, &c->intermediate_size)) ||
        (rc = get_int(root, "num_hidden_layers", 1, 1024, -1, label, &c->n_layers)) ||
        (rc = get_int(root, "num_attention_heads", 1, 1024, -1, label, &c->n_heads)) ||
        (rc = get_int(root, "num_key_value_heads", 1, 1024, c->n_heads, label, &c->n_kv_heads)) ||
        (rc = get_int(root, "max_position_embeddings", 1, 1 << 24, 4096, label, &c->max_pos)) ||
        (rc = get_float(root, "rms_norm_eps", 0, 1, 1e-6, label, &c->rms_eps)) ||
        (rc = get_bool(root, "tie_word_embeddings", 0, label, &c->tie_embeddings)))
        goto done;
    if (c->hidden_size % c->n_heads && !field(root, "head_dim")) {
        log_error("%s: hidden_size %d is not a multiple of num_attention_heads %d; set head_dim",
                  label, c->hidden_size, c->n_heads);
        rc = ERR_FORMAT;
        goto done;
    }
    if ((rc = get_int(root, "head_dim", 2, 1024, c->hidden_size / c->n_heads, label, &c->head_dim)))
        goto done;
    if (c->head_dim % 2 || c->n_heads % c->n_kv_heads) {
        log_error("%s: head_dim %d must be even and num_attention_heads %d a multiple of "
                  "num_key_value_heads %d",
                  label, c->head_dim, c->n_heads, c->n_kv_heads);
        rc = ERR_FORMAT;
        goto done;
    }
    const cJSON *act = field(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu"))) {
        log_error("%s: hidden_act must be \"silu\"", label);
        rc = ERR_UNSUPPORTED;
        goto done;
    }
    int use_sw = c->arch == ARCH_MISTRAL;
    if (c->arch == ARCH_QWEN2 && (rc = get_bool(root, "use_sliding_window", 0, label, &use_sw)))
        goto done;
    if (use_sw && (rc = get_int(root, "sliding_window", 0, 1 << 30, 0, label, &c->sliding_window)))
        goto done;
    if ((rc = parse_rope(root, label, c))) goto done;
    if ((rc = get_int(root, "bos_token_id", -1, 1 << 22, -1, label, &c->bos_id))) goto done;
    if ((rc = add_eos(root, label, c))) goto done;
    if (c->arch == ARCH_DSPARK || c->arch == ARCH_DFLASH) rc = parse_block_drafter(root, label, c);
done:
    cJSON_Delete(root);
    return rc;
}

int hf_generation_config_parse(const char *json, size_t len, const char *label,
                               struct hf_config *c) {
    const char *why = "not an object";
    cJSON *root = json_parse(json, len, &why);
    int rc = OK;
    if (!cJSON_IsObject(root)) {
        log_error("%s: not a JSON object (%s)", label, why);
        rc = ERR_FORMAT;
        goto done;
    }
    if ((rc = add_eos(root, label, c)) ||
        (rc = get_bool(root, "do_sample", 0, label, &c->do_sample)) ||
        (rc = get_float(root, "temperature", 0, 100, 1.0, label, &c->temperature)) ||
        (rc = get_float(root, "top_p", 0, 1, 1.0, label, &c->top_p)) ||
        (rc = get_int(root, "top_k", 0, 1 << 22, 0, label, &c->top_k)))
        goto done;
    int bos;
    if ((rc = get_int(root, "bos_token_id", -1, 1 << 22, -1, label, &bos))) goto done;
    if (bos >= 0) c->bos_id = bos;
done:
    cJSON_Delete(root);
    return rc;
}

int hf_config_is_eos(const struct hf_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}

int hf_config_load(const char *dir, struct hf_config *out) {
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    int rc = fs_join(path, sizeof path, dir, "config.json");
    if (rc) return rc;
    if ((rc = fs_read_file(path, &text, &len, 16u << 20))) {
        log_hint("--model must name a Hugging Face model folder holding config.json");
        return rc;
    }
    rc = hf_config_parse(text, len, path, out);
    free(text);
    if (rc) return rc;
    out->temperature = 1.0f;
    out->top_p = 1.0f;
    if ((rc = fs_join(path, sizeof path, dir, "generation_config.json"))) return rc;
    if (!fs_exists(path)) return OK;
    if ((rc = fs_read_file(path, &text, &len, 16u << 20))) return rc;
    rc = hf_generation_config_parse(text, len, path, out);
    free(text);
    return rc;
}
