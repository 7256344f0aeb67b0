#include "tools/stats/svg.h"

#include <stdint.h>
#include <string.h>

#include "common/utf8.h"

/* XML 1.0 Char: tab, newline, carriage return, U+0020..U+D7FF, U+E000..U+FFFD,
 * U+10000..U+10FFFF (utf8_decode already refuses surrogates). */
static int xml_char(uint32_t cp)
{
    return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp != 0xFFFE && cp != 0xFFFF);
}

void svg_escape(FILE *f, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        uint32_t cp;
        size_t len = utf8_decode(s, n, &cp);
        if (len == 0 || !xml_char(cp)) {
            fputs("\xEF\xBF\xBD", f); /* U+FFFD */
            len = len ? len : 1;
        } else if (len == 1 && strchr("&<>\"'", *s)) {
            fputs(*s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;"
                  : *s == '"' ? "&quot;" : "&apos;", f);
        } else {
            fwrite(s, 1, len, f);
        }
        s += len;
        n -= len;
    }
}

/* Attribute name="value" with the value escaped. */
static void attr(FILE *f, const char *name, const char *value)
{
    fprintf(f, " %s=\"", name);
    svg_escape(f, value);
    fputc('"', f);
}

void svg_begin(FILE *f, double width, double height, const char *title)
{
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\""
               " viewBox=\"0 0 %g %g\" font-family=\"sans-serif\">\n",
            width, height, width, height);
    fputs("<title>", f);
    svg_escape(f, title);
    fputs("</title>\n", f);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%g\" height=\"%g\" fill=\"white\"/>\n", width,
            height);
}

void svg_end(FILE *f)
{
    fputs("</svg>\n", f);
}

void svg_group_begin(FILE *f, const char *id, double x, double y)
{
    fputs("<g", f);
    attr(f, "id", id);
    fprintf(f, " transform=\"translate(%g %g)\">\n", x, y);
}

void svg_group_end(FILE *f)
{
    fputs("</g>\n", f);
}

void svg_line(FILE *f, double x1, double y1, double x2, double y2, const char *stroke,
              double stroke_width)
{
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2);
    attr(f, "stroke", stroke);
    fprintf(f, " stroke-width=\"%g\"/>\n", stroke_width);
}

void svg_rect(FILE *f, double x, double y, double w, double h, const char *fill,
              const char *title)
{
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", x, y, w, h);
    attr(f, "fill", fill);
    if (!title) {
        fputs("/>\n", f);
        return;
    }
    fputs("><title>", f);
    svg_escape(f, title);
    fputs("</title></rect>\n", f);
}

void svg_polyline(FILE *f, const double *xy, size_t n, const char *stroke, double stroke_width,
                  const char *label)
{
    fputs("<polyline fill=\"none\"", f);
    attr(f, "stroke", stroke);
    fprintf(f, " stroke-width=\"%g\" stroke-linejoin=\"round\"", stroke_width);
    attr(f, "data-series", label);
    fputs(" points=\"", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%.2f,%.2f", i ? " " : "", xy[2 * i], xy[2 * i + 1]);
    fputs("\"><title>", f);
    svg_escape(f, label);
    fputs("</title></polyline>\n", f);
}

void svg_circle(FILE *f, double cx, double cy, double r, const char *fill)
{
    fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%g\"", cx, cy, r);
    attr(f, "fill", fill);
    fputs("/>\n", f);
}

void svg_text(FILE *f, double x, double y, const char *anchor, double size, double rotate,
              const char *text)
{
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%g\"", x, y, size);
    attr(f, "text-anchor", anchor);
    if (rotate != 0)
        fprintf(f, " transform=\"rotate(%g %.2f %.2f)\"", rotate, x, y);
    fputc('>', f);
    svg_escape(f, text);
    fputs("</text>\n", f);
}
