/* cli/bench_svg.c: `dspark benchmark --svg`: decode tokens/s as a grouped bar chart, one group
 * per category (then all prompts), one bar per run, in plain SVG that any browser shows. Bars
 * of one mode share a hue, lighter for each further cap; --max-draft auto runs are outlined.
 * Every bar carries its value as a label and as a tooltip. */
#include "cli/bench.h"

#include <math.h>
#include <stdio.h>

#define BAR    16 /* px per bar */
#define GAP    28 /* px between groups */
#define LEFT   72
#define TOP    56
#define PLOT_H 300
#define BOTTOM 48
#define LEGEND 230

/* Text with &, <, > and quotes escaped. */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* A mode's hue, lightened towards white by t in [0, 1). */
static void color(enum gen_mode m, double t, char *out, size_t cap) {
    static const int rgb[][3] = {
        {120, 120, 120}, {31, 119, 180}, {44, 160, 44}, {255, 127, 14}, {148, 103, 189}};
    const int *c = rgb[(unsigned)m < 5 ? m : 0];
    snprintf(out, cap, "#%02x%02x%02x", (int)(c[0] + (255 - c[0]) * t),
             (int)(c[1] + (255 - c[1]) * t), (int)(c[2] + (255 - c[2]) * t));
}

/* A round tick step giving about five ticks up to top. */
static double tick_step(double top) {
    double raw = top / 5, p = pow(10, floor(log10(raw)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

int bench_write_svg(const struct bench *b, const char *path, int threads) {
    const struct opts *o = &b->o;
    int n_runs = o->n_runs, n_groups = b->n_cats + (b->n_cats > 1); /* categories, all */
    double v[MAX_RUNS][MAX_CATS + 1], top = 0;
    for (int ri = 0; ri < n_runs; ri++)
        for (int g = 0; g < n_groups; g++) {
            v[ri][g] = bench_group_decode(b, ri, g < b->n_cats ? g : b->n_cats);
            if (v[ri][g] > top) top = v[ri][g];
        }
    double step = tick_step(top > 0 ? top : 1), ymax = step * ceil((top > 0 ? top : 1) / step);
    if (ymax < top * 1.08) ymax += step; /* room for the labels */
    int group_w = n_runs * BAR + GAP, plot_w = n_groups * group_w;
    int legend_h = 20 + 18 * n_runs;
    int width = LEFT + plot_w + LEGEND, height = TOP + PLOT_H + BOTTOM;
    if (TOP + legend_h > height) height = TOP + legend_h;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "error: could not write %s\n", path);
        return -1;
    }
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height, width, height);
    fprintf(
        f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">decode tokens/s: ", LEFT);
    put_text(f, o->model_dir);
    fprintf(f, ", %d threads, %d prompts, %s</text>\n", threads, b->n_prompts,
            o->temperature > 0 ? "sampling" : "greedy");
    fprintf(f,
            "<text x=\"%d\" y=\"40\" fill=\"#555\">median over %d trial%s; outlined bars: "
            "--max-draft auto</text>\n",
            LEFT, o->trials, o->trials == 1 ? "" : "s");
    /* axis and grid */
    for (double y = 0; y <= ymax + step / 2; y += step) {
        double py = TOP + PLOT_H - PLOT_H * y / ymax;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%g</text>\n",
                LEFT, LEFT + plot_w, py, py, LEFT - 6, py + 4, y);
    }
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT,
            LEFT + plot_w, TOP + PLOT_H, TOP + PLOT_H);
    /* bars: per mode, the k-th run of that mode is lightened by k / (runs of the mode) */
    char fill[MAX_RUNS][8];
    for (int ri = 0; ri < n_runs; ri++) {
        int k = 0, same = 0;
        for (int j = 0; j < n_runs; j++) {
            same += o->runs[j].mode == o->runs[ri].mode;
            k += j < ri && o->runs[j].mode == o->runs[ri].mode;
        }
        color(o->runs[ri].mode, 0.65 * k / (same > 1 ? same : 1), fill[ri], sizeof fill[ri]);
    }
    for (int g = 0; g < n_groups; g++) {
        int gx = LEFT + g * group_w + GAP / 2;
        const char *gname = bench_group_name(b, g < b->n_cats ? g : b->n_cats);
        for (int ri = 0; ri < n_runs; ri++) {
            double h = PLOT_H * v[ri][g] / ymax, x = gx + ri * BAR, y = TOP + PLOT_H - h;
            int outline = o->runs[ri].max_draft == RUN_AUTO_DRAFT;
            fprintf(
                f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"%s><title>",
                x + 1, y, BAR - 2, h, fill[ri],
                outline ? " stroke=\"black\" stroke-width=\"1.5\"" : "");
            put_text(f, o->runs[ri].name);
            fputs(", ", f);
            put_text(f, gname);
            fprintf(f, ": %.0f tok/s</title></rect>\n", v[ri][g]);
            if (v[ri][g] > 0)
                fprintf(f,
                        "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"9\" "
                        "fill=\"#333\">%.0f</text>\n",
                        x + BAR / 2 + 3, y - 3, v[ri][g]);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">",
                gx + n_runs * BAR / 2, TOP + PLOT_H + 20);
        put_text(f, gname);
        fputs("</text>\n", f);
    }
    /* legend */
    int lx = LEFT + plot_w + 16;
    for (int ri = 0; ri < n_runs; ri++) {
        int ly = TOP + 18 * ri, outline = o->runs[ri].max_draft == RUN_AUTO_DRAFT;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"%s/>\n", lx, ly,
                fill[ri], outline ? " stroke=\"black\" stroke-width=\"1.5\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", lx + 18, ly + 10);
        put_text(f, o->runs[ri].name);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    int rc = ferror(f) ? -1 : 0;
    if (fclose(f)) rc = -1;
    if (rc) fprintf(stderr, "error: could not write %s\n", path);
    return rc;
}
