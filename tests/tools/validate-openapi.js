// Validates an OpenAPI document with @apidevtools/swagger-parser (the
// OpenAPI 3.0 schema and its references): exit 0 when valid, else 1 with
// the validator's message.  usage: node validate-openapi.js FILE
const SwaggerParser = require("@apidevtools/swagger-parser");
SwaggerParser.validate(process.argv[2]).then(
  (api) => {
    console.log("valid: " + api.info.title + ", " + Object.keys(api.paths).length + " paths");
  },
  (err) => {
    console.error("invalid: " + err.message);
    process.exit(1);
  });
