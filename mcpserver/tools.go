package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reportURIPrefix is where past reports live as resources: sbx://reports/{id}.
const reportURIPrefix = "sbx://reports/"

// GetReportInput is the input of sbx_get_report.
type GetReportInput struct {
	ID string `json:"id,omitempty" jsonschema:"id of a past sbx_run; empty: list the ids kept"`
}

// ReportList is what sbx_get_report returns without an id.
type ReportList struct {
	IDs []string `json:"ids" jsonschema:"ids of the runs kept, newest first"`
}

func (s *Server) addTools() {
	s.addRunTool()
	s.addProfileTools()
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: "sbx_get_report",
		Description: "Return a past sbx_run by id: the same report, stdout and stderr as the call returned. " +
			"Without an id, list the ids kept (the server keeps the last few runs in memory).",
		Annotations:  readOnly("past sbx report"),
		OutputSchema: getReportSchema(),
	}, s.handleGetReport)
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "sbx-report", Title: "sbx run report", MIMEType: "application/json",
		URITemplate: reportURIPrefix + "{id}",
		Description: "The sbx.report/v1 report of a past sbx_run, with its stdout and stderr",
	}, s.readReport)
}

// getReportSchema is the output schema of sbx_get_report: one of sbx_run's output (with an id) or the
// list of ids (without). The top level says "type": "object", as MCP requires of an output schema; the
// SDK validates every result against it. The two branches exclude each other: each has required fields
// and no additional properties.
func getReportSchema() *jsonschema.Schema {
	run, err := jsonschema.For[RunOutput](nil)
	if err != nil {
		panic(fmt.Sprintf("schema of RunOutput: %v", err))
	}
	list, err := jsonschema.For[ReportList](nil)
	if err != nil {
		panic(fmt.Sprintf("schema of ReportList: %v", err))
	}
	return &jsonschema.Schema{Type: "object", OneOf: []*jsonschema.Schema{run, list},
		Description: "with an id: that run's report, stdout and stderr (as sbx_run returned them); without: the ids kept"}
}

// handleGetReport returns a RunOutput or, without an id, a ReportList; the output is untyped for that.
func (s *Server) handleGetReport(_ context.Context, _ *mcp.CallToolRequest, in GetReportInput) (*mcp.CallToolResult, any, error) {
	if in.ID == "" {
		ids := s.reports.list()
		return textResult("runs kept: " + strings.Join(ids, ", ")), &ReportList{IDs: ids}, nil
	}
	out, ok := s.reports.get(in.ID)
	if !ok {
		return nil, nil, fmt.Errorf("no run %q: the server keeps the last %d runs, and none survives a restart", in.ID, s.cfg.KeepReports)
	}
	return textResult(summary(out)), out, nil
}

func (s *Server) readReport(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	out, ok := s.reports.get(strings.TrimPrefix(uri, reportURIPrefix))
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
}
