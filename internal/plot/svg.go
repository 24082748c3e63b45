package plot

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"math"
	"strconv"
	"strings"
)

// renderSVG renders d as an SVG document.
func renderSVG(b *bytes.Buffer, d *drawing) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n",
		d.width, d.height, d.width, d.height, plotFontSize)
	for _, m := range d.marks {
		switch m := m.(type) {
		case rectMark:
			fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="%s"/>`+"\n",
				svgNum(m.x), svgNum(m.y), svgNum(m.w), svgNum(m.h), svgColor(m.fill), svgColor(m.stroke))
		case lineMark:
			fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n",
				svgNum(m.x1), svgNum(m.y1), svgNum(m.x2), svgNum(m.y2), svgColor(m.stroke))
		case polylineMark:
			pts := make([]string, len(m.pts))
			for i, p := range m.pts {
				pts[i] = svgNum(p.x) + "," + svgNum(p.y)
			}
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round" stroke-linecap="round" points="%s"/>`+"\n",
				svgColor(m.stroke), svgNum(m.width), strings.Join(pts, " "))
		case dotMark:
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="%s" fill="%s"/>`+"\n", svgNum(m.c.x), svgNum(m.c.y), svgNum(m.r), svgColor(m.fill))
		case textMark:
			b.WriteString("<text ")
			if m.vertical {
				fmt.Fprintf(b, `transform="translate(%s,%s) rotate(-90)"`, svgNum(m.x), svgNum(m.y))
			} else {
				fmt.Fprintf(b, `x="%s" y="%s"`, svgNum(m.x), svgNum(m.y))
			}
			switch m.anchor {
			case anchorMiddle:
				b.WriteString(` text-anchor="middle"`)
			case anchorEnd:
				b.WriteString(` text-anchor="end"`)
			}
			if m.size != plotFontSize {
				fmt.Fprintf(b, ` font-size="%d"`, m.size)
			}
			if m.fill != plotTextColor {
				fmt.Fprintf(b, ` fill="%s"`, svgColor(m.fill))
			}
			fmt.Fprintf(b, ">%s</text>\n", html.EscapeString(m.s))
		default:
			panic(fmt.Sprintf("renderSVG: unknown mark %T", m))
		}
	}
	b.WriteString("</svg>\n")
}

// svgNum prints a coordinate to a tenth of a pixel, without trailing
// zeros.
func svgNum(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func svgColor(c color.RGBA) string {
	if c.A == 0 {
		return "none"
	}
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}
