// textkit: the `demo:textkit/text` interface of wit/textkit.wit, in C.
//
// wit-bindgen generates textkit.h and the glue from the WIT (see ../build.sh); this file only
// implements the two functions. Strings arrive as UTF-8 (pointer, length), owned by us: we
// free them. Results are malloc'ed; the generated post-return code frees them.

#include <stdlib.h>
#include <string.h>

#include "textkit.h"

static int is_alnum(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void exports_demo_textkit_text_slugify(textkit_string_t *s, textkit_string_t *ret) {
    uint8_t *out = malloc(s->len + 1);
    size_t n = 0;
    int dash = 0;
    for (size_t i = 0; out != NULL && i < s->len; i++) {
        uint8_t c = s->ptr[i];
        if (is_alnum(c)) {
            if (dash && n > 0) {
                out[n++] = '-';
            }
            dash = 0;
            out[n++] = (c >= 'A' && c <= 'Z') ? (uint8_t)(c - 'A' + 'a') : c;
        } else {
            dash = 1;
        }
    }
    ret->ptr = out;
    ret->len = out == NULL ? 0 : n;
    textkit_string_free(s);
}

void exports_demo_textkit_text_count(textkit_string_t *s, exports_demo_textkit_text_stats_t *ret) {
    uint32_t words = 0, lines = s->len > 0 ? 1 : 0;
    int in_word = 0;
    for (size_t i = 0; i < s->len; i++) {
        uint8_t c = s->ptr[i];
        if (c == '\n' && i + 1 < s->len) {
            lines++;
        }
        if (is_space(c)) {
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            words++;
        }
    }
    ret->words = words;
    ret->lines = lines;
    ret->bytes = (uint32_t)s->len;
    textkit_string_free(s);
}
