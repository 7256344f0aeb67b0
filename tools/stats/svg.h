/* svg: the few SVG elements llmq-stats draws with, written straight to a
 * FILE.  No library: a chart is lines, rectangles and text.
 *
 * The output is a standalone, well-formed XML document: every text and
 * attribute value goes through svg_escape, which escapes markup characters
 * and drops what XML 1.0 cannot carry (control characters, invalid UTF-8).
 * Colours, anchors and other attribute constants passed in by the caller are
 * escaped too, so nothing the caller passes can break the document. */
#ifndef LLMQ_TOOLS_STATS_SVG_H
#define LLMQ_TOOLS_STATS_SVG_H

#include <stddef.h>
#include <stdio.h>

/* The XML declaration, the <svg> element of width x height user units with
 * a white background, and its <title>. */
void svg_begin(FILE *f, double width, double height, const char *title);
void svg_end(FILE *f);

/* <g> with an id (data-* consumers look elements up by it), translated. */
void svg_group_begin(FILE *f, const char *id, double x, double y);
void svg_group_end(FILE *f);

void svg_line(FILE *f, double x1, double y1, double x2, double y2, const char *stroke,
              double stroke_width);
void svg_rect(FILE *f, double x, double y, double w, double h, const char *fill,
              const char *title);
/* A polyline through n points xy[2i], xy[2i+1]; label becomes its
 * data-series attribute and its <title>. */
void svg_polyline(FILE *f, const double *xy, size_t n, const char *stroke, double stroke_width,
                  const char *label);
void svg_circle(FILE *f, double cx, double cy, double r, const char *fill);
/* anchor: "start", "middle" or "end"; rotate: degrees about (x, y). */
void svg_text(FILE *f, double x, double y, const char *anchor, double size, double rotate,
              const char *text);

/* s with &, <, >, " and ' as entities, invalid bytes and XML-forbidden
 * control characters replaced by U+FFFD. */
void svg_escape(FILE *f, const char *s);

#endif
