// Command probe is the container health check of the tallyd image, which has no shell
// and no curl (distroless): it asks a URL, by default this container's own
// http://127.0.0.1:9464/readyz, and exits 0 when the answer is 200, 1 otherwise.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// DefaultURL is tallyd's readiness on the metrics address the image sets
// (TALLY_METRICS=0.0.0.0:9464), asked from inside the container.
const DefaultURL = "http://127.0.0.1:9464/readyz"

func run(args []string, stderr io.Writer) int {
	url := DefaultURL
	if len(args) > 0 {
		url = args[0]
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, "probe:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "probe: %s: %s %s\n", url, resp.Status, body)
		return 1
	}
	return 0
}
