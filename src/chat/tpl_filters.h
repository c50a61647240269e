/* chat/tpl_filters.h: the filter signature and the sequence filters of tpl_filters_seq.c,
 * which tpl_filters.c lists in its table. Every filter returns a new value in *out. */
#ifndef DSPARK_CHAT_TPL_FILTERS_H
#define DSPARK_CHAT_TPL_FILTERS_H

#include "chat/tpl_impl.h"

typedef int tpl_filter_fn(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                          struct tv *out);

tpl_filter_fn tpl_f_attr, tpl_f_batch, tpl_f_dictsort, tpl_f_first, tpl_f_items, tpl_f_join,
    tpl_f_last, tpl_f_list, tpl_f_map, tpl_f_max, tpl_f_min, tpl_f_reject, tpl_f_rejectattr,
    tpl_f_reverse, tpl_f_select, tpl_f_selectattr, tpl_f_slice, tpl_f_sort, tpl_f_sum, tpl_f_unique;

#endif
