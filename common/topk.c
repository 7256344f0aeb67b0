#include "common/topk.h"

/* Sift-down in a heap whose root is the *worst* element. */
static void sift_down(topk_entry *h, int32_t n, int32_t i)
{
    topk_entry x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && topk_better(h[c], h[c + 1]))
            c++;
        if (!topk_better(x, h[c]))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

void topk_select(topk_entry *h, const float *x, const int32_t *ids, int32_t n, int32_t k)
{
    for (int32_t i = 0; i < k; i++)
        h[i] = (topk_entry){x[i], ids ? ids[i] : i};
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        sift_down(h, k, i);
    for (int32_t i = k; i < n; i++) {
        topk_entry c = {x[i], ids ? ids[i] : i};
        if (topk_better(c, h[0])) {
            h[0] = c;
            sift_down(h, k, 0);
        }
    }
    for (int32_t m = k; m > 1; m--) {
        topk_entry worst = h[0];
        h[0] = h[m - 1];
        h[m - 1] = worst;
        sift_down(h, m - 1, 0);
    }
}

int topk_cmp(const void *a, const void *b)
{
    const topk_entry *x = a, *y = b;
    return topk_better(*x, *y) ? -1 : topk_better(*y, *x) ? 1 : 0;
}
