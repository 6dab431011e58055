// promql-check parses PromQL expressions with Prometheus' own parser: one expression per
// line of stdin, escaped as a JSON string; prints one line per expression, "ok" or the error.
// The chart's tests (tests/unit/test_helm_chart.py) feed it every alert expression.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	promql := parser.NewParser(parser.Options{})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var expr string
		if err := json.Unmarshal(scanner.Bytes(), &expr); err != nil {
			fmt.Println(err)
			continue
		}
		if _, err := promql.ParseExpr(expr); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("ok")
	}
}
