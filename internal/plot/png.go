package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// plotFace is the PNG's font: the fixed 7×13 face needs no font file and
// is about the size of the SVG's 12 pixel sans-serif.
var plotFace = basicfont.Face7x13

// renderPNG renders d into an image, shapes anti-aliased. Axis-parallel
// 1 pixel lines are moved to pixel centres so that the grid and the
// frame are sharp rather than 2 pixels of grey.
func renderPNG(d *drawing) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, d.width, d.height))
	p := &painter{img: img}
	for _, m := range d.marks {
		switch m := m.(type) {
		case rectMark:
			if m.fill.A != 0 {
				p.rect(m.x, m.y, m.x+m.w, m.y+m.h)
				p.paint(m.fill)
			}
			if m.stroke.A != 0 {
				// A ring: the inner rectangle, wound the other way,
				// cancels the outer one.
				x0, y0, x1, y1 := pixelCentre(m.x), pixelCentre(m.y), pixelCentre(m.x+m.w), pixelCentre(m.y+m.h)
				p.rect(x0-0.5, y0-0.5, x1+0.5, y1+0.5)
				p.polygon([]point{{x0 + 0.5, y0 + 0.5}, {x0 + 0.5, y1 - 0.5}, {x1 - 0.5, y1 - 0.5}, {x1 - 0.5, y0 + 0.5}})
				p.paint(m.stroke)
			}
		case lineMark:
			a, b := point{m.x1, m.y1}, point{m.x2, m.y2}
			if a.x == b.x {
				a.x, b.x = pixelCentre(a.x), pixelCentre(b.x)
			}
			if a.y == b.y {
				a.y, b.y = pixelCentre(a.y), pixelCentre(b.y)
			}
			p.segment(a, b, 0.5)
			p.paint(m.stroke)
		case polylineMark:
			// Overlapping parts of one path cover a pixel once: the
			// rasterizer clamps the accumulated coverage to 1.
			hw := m.width / 2
			for i, pt := range m.pts {
				p.circle(pt, hw)
				if i > 0 {
					p.segment(m.pts[i-1], pt, hw)
				}
			}
			p.paint(m.stroke)
		case dotMark:
			p.circle(m.c, m.r)
			p.paint(m.fill)
		case textMark:
			drawText(img, m)
		default:
			panic(fmt.Sprintf("renderPNG: unknown mark %T", m))
		}
	}
	return img
}

// pixelCentre moves a coordinate to the middle of its pixel.
func pixelCentre(v float64) float64 { return math.Floor(v) + 0.5 }

// A painter collects polygons and paints them onto img in one colour.
// All its polygons are wound the same way (clockwise on the screen), so
// that overlapping ones add up rather than cancel.
type painter struct {
	img   *image.RGBA
	z     vector.Rasterizer
	polys [][]point
}

func (p *painter) polygon(pts []point) { p.polys = append(p.polys, pts) }

func (p *painter) rect(x0, y0, x1, y1 float64) {
	p.polygon([]point{{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}})
}

// segment adds the line from a to b, hw either side of it, with square
// ends at a and b.
func (p *painter) segment(a, b point, hw float64) {
	dx, dy := b.x-a.x, b.y-a.y
	l := math.Hypot(dx, dy)
	if l == 0 {
		return
	}
	nx, ny := -dy/l*hw, dx/l*hw
	p.polygon([]point{{a.x - nx, a.y - ny}, {b.x - nx, b.y - ny}, {b.x + nx, b.y + ny}, {a.x + nx, a.y + ny}})
}

func (p *painter) circle(c point, r float64) {
	n := max(12, int(8*r))
	pts := make([]point, n)
	for i := range pts {
		t := 2 * math.Pi * float64(i) / float64(n)
		pts[i] = point{c.x + r*math.Cos(t), c.y + r*math.Sin(t)}
	}
	p.polygon(pts)
}

// paint fills the polygons collected so far with c and forgets them. It
// rasterizes only their bounding box: the cost is then that of the shape,
// not of the whole image.
func (p *painter) paint(c color.RGBA) {
	lo, hi := point{math.Inf(1), math.Inf(1)}, point{math.Inf(-1), math.Inf(-1)}
	for _, poly := range p.polys {
		for _, pt := range poly {
			lo = point{math.Min(lo.x, pt.x), math.Min(lo.y, pt.y)}
			hi = point{math.Max(hi.x, pt.x), math.Max(hi.y, pt.y)}
		}
	}
	defer func() { p.polys = p.polys[:0] }()
	if lo.x > hi.x {
		return
	}
	r := image.Rect(int(math.Floor(lo.x)), int(math.Floor(lo.y)), int(math.Ceil(hi.x)), int(math.Ceil(hi.y))).
		Intersect(p.img.Bounds())
	if r.Empty() {
		return
	}
	// The rasterizer's origin is r.Min.
	p.z.Reset(r.Dx(), r.Dy())
	ox, oy := float64(r.Min.X), float64(r.Min.Y)
	for _, poly := range p.polys {
		p.z.MoveTo(float32(poly[0].x-ox), float32(poly[0].y-oy))
		for _, pt := range poly[1:] {
			p.z.LineTo(float32(pt.x-ox), float32(pt.y-oy))
		}
		p.z.ClosePath()
	}
	p.z.Draw(p.img, r, image.NewUniform(c), image.Point{})
}

// drawText draws t with plotFace; text larger than plotFontSize, the
// title, is drawn bold (twice, a pixel apart), as the face has one size.
func drawText(img *image.RGBA, t textMark) {
	bold := t.size > plotFontSize
	w := font.MeasureString(plotFace, t.s).Ceil()
	if bold {
		w++
	}
	off := 0
	switch t.anchor {
	case anchorMiddle:
		off = w / 2
	case anchorEnd:
		off = w
	}
	x, y := int(math.Round(t.x)), int(math.Round(t.y))
	if !t.vertical {
		dr := font.Drawer{Dst: img, Src: image.NewUniform(t.fill), Face: plotFace, Dot: fixed.P(x-off, y)}
		dr.DrawString(t.s)
		if bold {
			dr.Dot = fixed.P(x-off+1, y)
			dr.DrawString(t.s)
		}
		return
	}
	// Draw the text horizontally into a mask, then turn the mask a
	// quarter turn anticlockwise: text pixel (tx, ty) lands at
	// (ty, w-1-tx), and the baseline on the column x.
	h := plotFace.Ascent + plotFace.Descent
	flat := image.NewAlpha(image.Rect(0, 0, w, h))
	dr := font.Drawer{Dst: flat, Src: image.Opaque, Face: plotFace, Dot: fixed.P(0, plotFace.Ascent)}
	dr.DrawString(t.s)
	turned := image.NewAlpha(image.Rect(0, 0, h, w))
	for ty := range h {
		for tx := range w {
			turned.SetAlpha(ty, w-1-tx, flat.AlphaAt(tx, ty))
		}
	}
	at := image.Pt(x-plotFace.Ascent, y+off-w)
	draw.DrawMask(img, turned.Bounds().Add(at), image.NewUniform(t.fill), image.Point{}, turned, image.Point{}, draw.Over)
}
